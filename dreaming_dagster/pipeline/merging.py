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


# ------------------------------------------------------------------------------- a batch's merge plan
@dataclass
class NewSubject:
    """A subject the batch inserts: its id is chosen here, so later pairs of the batch can merge into it."""

    subject_id: str
    name: str
    description: str
    subject_type: str
    created_at: object
    last_seen_at: object
    reinforcement_count: int = 1


@dataclass
class Reinforcement:
    """What the batch adds to a subject that was live before it."""

    subject_id: str
    description: str
    last_seen_at: object
    reinforcements: int = 0


@dataclass
class MergePlan:
    """Every write of one batch, decided in memory: subjects to insert and to reinforce, and each pair's
    subjects with the id they landed on."""

    new_subjects: dict[str, NewSubject]
    reinforced: dict[str, Reinforcement]
    pair_subjects: list[tuple[object, list[dict]]]  # (pair id, its subjects with subject_id set)
    created: int = 0
    merged: int = 0
    reused: int = 0


@dataclass(frozen=True)
class BatchCandidates:
    """What the database knows for a batch, read in one statement (pipeline/merge_candidates.sql).

    ``nearest[name]``: the live subjects nearest the name at or above the threshold (most similar first,
    at most 5); ``between[name]``: the batch's names at or above the threshold from ``name``, itself
    included, with Postgres' own cosine (so a decision never depends on a second float implementation);
    ``same_name[name]``: the live subject of exactly that name (the exact-string guard);
    ``descriptions``: the description of every subject named above; ``live_ids``: which subject ids the
    pairs already carry are still live (a retried pair reuses them)."""

    nearest: dict[str, list[Candidate]]
    between: dict[str, dict[str, float]]
    same_name: dict[str, str]
    descriptions: dict[str, str]
    live_ids: frozenset[str]


def plan_batch_merge(pairs: Sequence[dict], known: BatchCandidates, new_id, threshold: float = DEFAULT_THRESHOLD
                     ) -> MergePlan:
    """The decisions the one-at-a-time merge makes, pair by pair and subject by subject, for a whole batch.

    Pairs are taken in order, so a later pair merges into a subject an earlier pair of the batch created,
    exactly as if the earlier pair had been written first: a created subject is a candidate for every
    later name within the threshold of its own name (its embedding is its name's). ``new_id()`` gives a
    new subject's id."""
    plan = MergePlan(new_subjects={}, reinforced={}, pair_subjects=[])
    created_by_name: dict[str, str] = {}  # name → id of the subject the batch created for it
    descriptions = dict(known.descriptions)

    def reinforce(subject_id: str, subject: dict, seen_at) -> None:
        descriptions[subject_id] = append_description(descriptions.get(subject_id, ""), subject.get("description", ""))
        if subject_id in plan.new_subjects:
            new = plan.new_subjects[subject_id]
            new.description = descriptions[subject_id]
            new.reinforcement_count += 1
            new.last_seen_at = max(new.last_seen_at, seen_at)
            return
        entry = plan.reinforced.setdefault(subject_id, Reinforcement(subject_id, "", seen_at))
        entry.description = descriptions[subject_id]
        entry.reinforcements += 1
        entry.last_seen_at = max(entry.last_seen_at, seen_at)

    for pair in pairs:
        subjects = [dict(s) for s in (pair["extracted_subjects"] or [])]
        seen_at = pair["occurred_at"]
        reinforced_here: set[str] = set()  # a pair reinforces a subject once
        for subject in subjects:
            known_id = subject.get("subject_id")
            if known_id and known_id in known.live_ids:
                plan.reused += 1
                continue
            name = subject["name"]
            batch_candidates = [Candidate(created_by_name[other], other, similarity)
                                for other, similarity in known.between.get(name, {}).items()
                                if other in created_by_name]
            candidates = sorted(known.nearest.get(name, []) + batch_candidates, key=lambda c: -c.similarity)[:5]
            target = choose_merge_target(candidates, threshold)
            if target is not None:
                subject_id = target.subject_id
            elif name in created_by_name or name in known.same_name:  # the exact-string guard
                subject_id = created_by_name.get(name) or known.same_name[name]
            else:
                subject_id = new_id()
                created_by_name[name] = subject_id
                descriptions[subject_id] = subject.get("description", "")
                plan.new_subjects[subject_id] = NewSubject(
                    subject_id, name, descriptions[subject_id], subject.get("type", "other"), seen_at, seen_at)
                plan.created += 1
                reinforced_here.add(subject_id)
                subject["subject_id"] = subject_id
                continue
            if subject_id not in reinforced_here:
                reinforce(subject_id, subject, seen_at)
            plan.merged += 1
            reinforced_here.add(subject_id)
            subject["subject_id"] = subject_id
        plan.pair_subjects.append((pair["id"], subjects))
    return plan
