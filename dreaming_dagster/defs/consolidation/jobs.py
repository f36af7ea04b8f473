import dagster as dg

from dreaming_dagster.defs.run_queue import CONSOLIDATION_JOB

# One consolidation pass for one user partition; requested by token_budget_sensor or by hand.
consolidation_job = dg.define_asset_job(
    name=CONSOLIDATION_JOB,
    selection=dg.AssetSelection.assets("dream_consolidation"),  # by key: hash buckets re-partition the asset
    executor_def=dg.in_process_executor,  # one step: no second process to start
    description="A token-budget consolidation pass over one user's graph.",
)
