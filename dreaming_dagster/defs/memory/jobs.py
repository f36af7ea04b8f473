import dagster as dg

# The main job: every asset of the dreaming group for one user partition. Later stages join the group
# and so join this job without changes here.
dreaming_job = dg.define_asset_job(
    name="dreaming_job",
    selection=dg.AssetSelection.groups("dreaming"),  # partitioned by users, like every asset it selects
    description="Dream for one user: every stage of the dreaming group, in lineage order.",
)
