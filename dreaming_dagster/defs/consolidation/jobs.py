import dagster as dg

from dreaming_dagster.defs.consolidation.assets import dream_consolidation

# One consolidation pass for one user partition; requested by token_budget_sensor or by hand.
consolidation_job = dg.define_asset_job(
    name="consolidation_job",
    selection=[dream_consolidation],
    description="A token-budget consolidation pass over one user's graph.",
)
