"""The dreaming pipeline: its stages in order (sync.STAGES), the stage functions over SQL, the merge rules,
refinement providers, pending-work keys and retry policy, and the per-user graph lock."""
