"""Stages 3–6 of dreaming: merge subjects, link them to pairs, refine, and the per-user lock."""
