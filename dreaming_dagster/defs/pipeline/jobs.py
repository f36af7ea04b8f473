import dagster as dg

from dreaming_dagster.defs.run_queue import DREAMING_JOB, REBUILD_JOB

# A run's steps share one process (one code load, one model load) instead of a process a step: the stages
# of one user (or of a bucket of users) are a few seconds of work against seconds of start-up a process.
# Re-execution from a failed step and the pools' limits hold in-process too.

# Rebuild chosen users' graphs from their stored pairs: pair_subjects clears the graph and resets every
# checkpoint first, then every stage runs. Launch it for several users at once from the job's page
# (Materialize → select partitions) to backfill, one run per user; with buckets, for every user of the
# chosen buckets (a few buckets a run, the assets' BackfillPolicy).
rebuild_user_graph = dg.define_asset_job(
    name=REBUILD_JOB,
    selection=dg.AssetSelection.groups("dreaming"),
    config={"ops": {"pair_subjects": {"config": {"rebuild": True}},
                    "memory_pairs": {"config": {"every_user": True}}}},
    executor_def=dg.in_process_executor,
    description="Clear a user's subjects and links (every user's of a bucket), reset the pipeline checkpoints, "
                "and dream again.",
)

# The main job: every asset of the dreaming group for one partition. Later stages join the group and so
# join this job without changes here.
dreaming_job = dg.define_asset_job(
    name=DREAMING_JOB,
    selection=dg.AssetSelection.groups("dreaming"),  # partitioned like every asset it selects
    executor_def=dg.in_process_executor,
    description="Dream for one user (or for the users of a hash bucket with work): every stage of the dreaming "
                "group, in lineage order.",
)
