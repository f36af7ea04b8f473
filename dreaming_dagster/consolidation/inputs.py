"""What a pass looks at: the user's live subjects (with vectors), recent summaries and earlier dreams,
cut into provider inputs that each fit the input-token budget.

Incremental: the subjects created or changed since the last pass plus each one's nearest live neighbours
(by cosine over the user's own subjects), so merge candidates outside the delta are found. Compact: the
whole graph in clusters of similar subjects that each fit the budget, then a pass across clusters over the
closest pairs that landed in different clusters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from dreaming_dagster.extraction.normalize import normalize_subject_name
from dreaming_dagster.ingest.tokens import count_tokens

NEIGHBOURS = 3
CROSS_CLUSTER_SIMILARITY = 0.85


def render_subject(subject: dict) -> str:
    description = " ".join((subject.get("description_text") or "").split())
    if len(description) > 300:
        description = description[:299] + "…"
    return (f"- id={subject['id']} | {subject['subject_text']} | {subject['subject_type']} | "
            f"links={subject['link_count']} | reinforced={subject['reinforcement_count']} | "
            f"importance={float(subject['importance']):.2f}{' | PINNED' if subject.get('pinned') else ''} | "
            f"first={subject['created_at']:%Y-%m-%d} | last={subject['last_seen_at']:%Y-%m-%d}"
            + (f" | {description}" if description else ""))


@dataclass
class PassInput:
    mode: str
    label: str
    subjects: list[dict]
    summaries: list[str] = field(default_factory=list)
    previous_dreams: list[str] = field(default_factory=list)
    changed: list[dict] | None = None  # incremental: the subjects created or changed since the last pass

    def render(self) -> str:
        parts = [f"Consolidation pass ({self.mode}, {self.label})."]
        if self.previous_dreams:
            parts.append("What you decided in your previous passes (newest first):\n"
                         + "\n".join(f"- {d}" for d in self.previous_dreams))
        if self.summaries:
            parts.append("Conversations since your last pass:\n" + "\n".join(f"- {s}" for s in self.summaries))
        parts.append("Subjects:\n" + "\n".join(render_subject(s) for s in self.subjects))
        return "\n\n".join(parts)

    @property
    def tokens(self) -> int:
        return count_tokens(self.render())


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


def _vectors(subjects: Sequence[dict]) -> np.ndarray:
    dims = next((len(s["embedding"]) for s in subjects if s["embedding"] is not None), 1)
    return _unit(np.stack([np.asarray(s["embedding"], np.float32) if s["embedding"] is not None
                           else np.zeros(dims, np.float32) for s in subjects])) if subjects else np.zeros((0, 1))


def _fit(subjects: list[dict], budget: int) -> list[dict]:
    kept, used = [], 0
    for subject in subjects:
        cost = count_tokens(render_subject(subject)) + 1
        if used + cost > budget and kept:
            break
        kept.append(subject)
        used += cost
    return kept


def incremental_input(snapshot: list[dict], since: datetime | None, summaries: list[str], dreams: list[str],
                      max_tokens: int) -> PassInput:
    delta = [s for s in snapshot if since is None or s["updated_at"] > since]
    chosen = {s["id"]: s for s in delta}
    if delta and len(snapshot) > 1:
        vectors = _vectors(snapshot)
        index = {s["id"]: i for i, s in enumerate(snapshot)}
        for subject in delta:
            similarity = vectors @ vectors[index[subject["id"]]]
            similarity[index[subject["id"]]] = -2
            for j in np.argsort(-similarity)[:NEIGHBOURS]:
                chosen.setdefault(snapshot[j]["id"], snapshot[j])
    # Summaries take at most a third of the budget; subjects the rest (the delta first, then neighbours).
    kept_summaries, used = [], 0
    for summary in reversed(summaries):  # newest first when cutting
        cost = count_tokens(summary) + 1
        if used + cost > max_tokens // 3:
            break
        kept_summaries.insert(0, summary)
        used += cost
    subjects = _fit(list(chosen.values()), max_tokens - used - count_tokens("\n".join(dreams)) - 200)
    return PassInput("incremental", f"{len(delta)} changed subjects and their neighbours", subjects,
                     kept_summaries, dreams, changed=delta)


def compact_clusters(snapshot: list[dict], max_tokens: int) -> list[list[dict]]:
    """Greedy clusters of similar subjects: seed with the most-linked unassigned subject, add its nearest
    unassigned subjects until the cluster's rendering fills the budget."""
    if not snapshot:
        return []
    vectors = _vectors(snapshot)
    costs = np.asarray([count_tokens(render_subject(s)) + 1 for s in snapshot])
    unassigned = np.ones(len(snapshot), bool)
    order = sorted(range(len(snapshot)), key=lambda i: (-snapshot[i]["link_count"], snapshot[i]["id"]))
    clusters = []
    for seed in order:
        if not unassigned[seed]:
            continue
        similarity = vectors @ vectors[seed]
        candidates = [i for i in np.argsort(-similarity, kind="stable") if unassigned[i]]
        members, used = [], 0
        for i in candidates:
            if used + costs[i] > max_tokens and members:
                break
            members.append(int(i))
            used += costs[i]
        unassigned[members] = False
        clusters.append([snapshot[i] for i in members])
    return clusters


def cross_cluster_input(clusters: list[list[dict]], live_ids: set[str], dreams: list[str],
                        max_tokens: int) -> PassInput | None:
    """The closest pairs of live subjects that landed in different clusters (cosine ≥ 0.85, or the same
    normalized name): the merges no single cluster could see."""
    members = [(c, s) for c, cluster in enumerate(clusters) for s in cluster if s["id"] in live_ids]
    if len(clusters) < 2 or len(members) < 2:
        return None
    subjects = [s for _, s in members]
    cluster_of = np.asarray([c for c, _ in members])
    vectors = _vectors(subjects)
    pairs = []
    for start in range(0, len(subjects), 1024):  # row blocks: the full matrix of a large graph would not fit
        block = vectors[start:start + 1024] @ vectors.T
        rows, cols = np.nonzero((block >= CROSS_CLUSTER_SIMILARITY)
                                & (cluster_of[start:start + 1024, None] != cluster_of[None, :]))
        pairs += [(-float(block[r, c]), start + int(r), int(c)) for r, c in zip(rows, cols, strict=True)
                  if start + r < c]
    by_name: dict[str, list[int]] = {}
    for i, subject in enumerate(subjects):
        by_name.setdefault(normalize_subject_name(subject["subject_text"]).casefold(), []).append(i)
    for same in by_name.values():
        pairs += [(-1.0, i, j) for a, i in enumerate(same) for j in same[a + 1:] if cluster_of[i] != cluster_of[j]]
    picked: dict[str, dict] = {}
    for _, i, j in sorted(pairs):
        picked.setdefault(subjects[i]["id"], subjects[i])
        picked.setdefault(subjects[j]["id"], subjects[j])
    if not picked:
        return None
    return PassInput("compact", "across clusters", _fit(list(picked.values()), max_tokens - 200), [], dreams)


def input_fingerprint(inputs: Sequence[PassInput]) -> str:
    """What is new in the input: the changed subjects (all of them, compacting) and the summaries."""
    digest = hashlib.sha256()
    for pass_input in inputs:
        subjects = pass_input.changed if pass_input.changed is not None else pass_input.subjects
        for subject in sorted(subjects, key=lambda s: s["id"]):
            digest.update(f"{subject['id']}@{subject['updated_at'].isoformat()}\n".encode())
        for summary in pass_input.summaries:
            digest.update(summary.encode())
    return digest.hexdigest()
