"""The merge rules of the subject graph. Pure functions: testable without a database.

A new subject merges into the closest existing subject of the same user and knowledge graph when their
cosine *similarity* is at least the threshold (default 0.75); candidates arrive ordered by cosine
*distance* ascending, i.e. most similar first. Mixing the two up — sorting by distance but comparing a
distance against a similarity threshold — is the bug that collapsed every user's graph into one node in
the reference write-up; :func:`choose_merge_target` checks both orders so it cannot come back silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SEPARATOR = " | "  # deliberately ugly: refinement looks for it
DEFAULT_THRESHOLD = 0.75


@dataclass(frozen=True)
class Candidate:
    subject_id: str
    subject_text: str
    similarity: float  # 1 - cosine distance


def choose_merge_target(candidates: Sequence[Candidate], threshold: float = DEFAULT_THRESHOLD) -> Candidate | None:
    """The most similar candidate at or above ``threshold``, or None (insert a new subject)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    for earlier, later in zip(candidates, candidates[1:], strict=False):
        if later.similarity > earlier.similarity + 1e-9:
            raise ValueError("merge candidates must be ordered most similar first (cosine distance ascending)")
    best = candidates[0] if candidates else None
    return best if best is not None and best.similarity >= threshold else None


def merge_ratio(created: int, merged: int) -> float:
    """Share of merge decisions that joined an existing subject (0 when nothing was decided)."""
    decided = created + merged
    return round(merged / decided, 3) if decided else 0.0


def append_description(existing: str, new: str) -> str:
    """Append a new description fragment with " | ", unless it is empty or already there."""
    existing, new = (existing or "").strip(), (new or "").strip()
    if not new:
        return existing
    if not existing:
        return new
    if new.lower() in (fragment.strip().lower() for fragment in existing.split(SEPARATOR.strip())):
        return existing
    return f"{existing}{SEPARATOR}{new}"


def description_fragments(description: str) -> list[str]:
    """The distinct fragments of a " | " description, in order."""
    seen, fragments = set(), []
    for fragment in (description or "").split(SEPARATOR.strip()):
        text = fragment.strip()
        if text and text.lower() not in seen:
            seen.add(text.lower())
            fragments.append(text)
    return fragments
