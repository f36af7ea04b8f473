"""The consolidation domain: token-budget dreaming passes per user (asset, job, sensor)."""
