"""LLM plumbing shared by extraction, refinement and dreaming passes: tolerant parsing and the client."""
