import dagster as dg

# Rebuild chosen users' graphs from their stored pairs: pair_subjects clears the graph and resets every
# checkpoint first, then every stage runs. Launch it for several users at once from the job's page
# (Materialize → select partitions) to backfill, one run per user.
rebuild_user_graph = dg.define_asset_job(
    name="rebuild_user_graph",
    selection=dg.AssetSelection.groups("dreaming"),
    config={"ops": {"pair_subjects": {"config": {"rebuild": True}}}},
    description="Clear a user's subjects and links, reset the pipeline checkpoints, and dream again.",
)

# The main job: every asset of the dreaming group for one user partition. Later stages join the group
# and so join this job without changes here.
dreaming_job = dg.define_asset_job(
    name="dreaming_job",
    selection=dg.AssetSelection.groups("dreaming"),  # partitioned by users, like every asset it selects
    description="Dream for one user: every stage of the dreaming group, in lineage order.",
)
