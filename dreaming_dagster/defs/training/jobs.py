import dagster as dg

# LongMemEval → memory → pools → models → evaluation, in lineage order; unpartitioned.
train_ranker_job = dg.define_asset_job(
    name="train_ranker_job",
    selection=dg.AssetSelection.groups("ranker"),
    description="Train and evaluate the Composite ranker on a LongMemEval-format file; publish it if it "
    "beats cosine.",
)
