"""Token-budget consolidation passes ("dreaming passes"): mutations, rules, providers and the pass."""
