"""Checking a pass's mutations against the user's live graph, then applying them in one transaction.

``GraphState.check`` runs each mutation, in order, against a simulated copy of the live graph, so a later
mutation sees the earlier ones (a rename after a merge, a merge into a subject created in this pass is
refused because the id is unknown). An invalid mutation is skipped with its reason and never blocks the
rest. ``apply_checked`` then writes the accepted ones; the caller holds the transaction, so a database
error rolls the whole pass back.

Rules: every id must be a live subject of this user and graph; pinned subjects are never changed;
protected subjects (importance ≥ 0.8 or reinforced ≥ 5 times) are never archived or superseded — a merge
loses nothing (links, counts and dates carry over to the target), so they may merge; a merge may not drop
a number, acronym or proper-noun word of a source from the target's name; names must stay unique; a
rename must be grounded in the subject's own name or descriptions, a created subject in the graph's
(``extraction/grounding.py``), so a pass cannot name what the memory never said.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property

import psycopg

from dreaming_dagster.consolidation.mutations import (
    ArchiveSubject,
    CreateSubject,
    MergeSubjects,
    RenameSubject,
    SupersedeSubject,
    UpdateDescription,
)
from dreaming_dagster.consolidation.rules import Protection, is_protected, merge_drops_identity
from dreaming_dagster.extraction.grounding import TextWords, is_grounded
from dreaming_dagster.extraction.normalize import normalize_subject_name
from dreaming_dagster.extraction.schema import SUBJECT_TYPES
from dreaming_dagster.pipeline.merging import append_description
from dreaming_dagster.sql import load_sql


@dataclass
class Outcome:
    mutation: dict
    status: str  # accepted → applied | skipped
    reason: str = ""
    change: dict = field(default_factory=dict)  # names before/after, for the diff
    input_index: int = 0  # which of the pass's provider inputs proposed it

    def as_dict(self) -> dict:
        return {"mutation": self.mutation, "status": self.status, "reason": self.reason, "change": self.change}

    @property
    def text_written_to(self) -> str | None:
        """The subject whose name or description this applied mutation wrote (None: it wrote no text)."""
        if self.status != "applied":
            return None
        op = self.mutation["op"]
        if op == "merge_subjects":
            return str(self.change["apply"]["target"]["id"])
        if op in ("rename_subject", "update_description"):
            return str(self.mutation["subject"])
        if op == "create_subject":
            return str(self.change["id"])
        return None


class GraphState:
    """The live graph of one user and graph as a pass's mutations would leave it."""

    def __init__(self, snapshot: list[dict], protection: Protection | None = None):
        self.live = {s["id"]: copy.copy(s) for s in snapshot}
        self.names = {s["subject_text"].casefold(): s["id"] for s in snapshot}
        self.protection = protection or Protection()
        self.creates = 0
        self._snapshot = snapshot

    @cached_property
    def memory_words(self) -> TextWords:
        """The words of the graph as the pass found it: what a created subject must be grounded in (read
        only for a pass that creates one)."""
        return TextWords.of(*(f"{s['subject_text']} {s.get('description_text') or ''}" for s in self._snapshot))

    def _subject(self, subject_id: str) -> dict:
        subject = self.live.get(subject_id)
        if subject is None:
            raise _Refused(f"unknown subject id {subject_id!r} (not a live subject of this user)")
        return subject

    def _not_pinned(self, subject: dict) -> None:
        if subject.get("pinned"):
            raise _Refused(f"{subject['subject_text']!r} is pinned")

    def _archivable(self, subject: dict) -> None:
        self._not_pinned(subject)
        if is_protected(subject, self.protection):
            raise _Refused(f"{subject['subject_text']!r} is protected (importance {float(subject['importance']):.2f}, "
                           f"reinforced {subject['reinforcement_count']}×)")

    def _free_name(self, name: str, owner: str | None = None) -> str:
        clean = normalize_subject_name(name)
        if not clean:
            raise _Refused(f"name {name!r} is empty once normalized")
        holder = self.names.get(clean.casefold())
        if holder is not None and holder != owner:
            raise _Refused(f"name {clean!r} belongs to another live subject")
        return clean

    def _leave(self, subject: dict) -> None:
        del self.live[subject["id"]]
        if self.names.get(subject["subject_text"].casefold()) == subject["id"]:
            del self.names[subject["subject_text"].casefold()]

    def check(self, mutation) -> Outcome:
        raw = mutation.model_dump()
        try:
            return Outcome(raw, "accepted", change=self._check(mutation))
        except _Refused as refused:
            return Outcome(raw, "skipped", str(refused))

    def _check(self, m) -> dict:
        if isinstance(m, MergeSubjects):
            target = self._subject(m.target)
            self._not_pinned(target)
            source_ids = list(dict.fromkeys(m.sources))
            if m.target in source_ids:
                raise _Refused("the target is also a source")
            sources = [self._subject(i) for i in source_ids]
            for source in sources:
                self._not_pinned(source)
            lost = merge_drops_identity(target["subject_text"], [(s["subject_text"], s["subject_type"]) for s in sources])
            if lost:
                raise _Refused(f"merging into {target['subject_text']!r} would drop {sorted(lost)} of the sources' names")
            description = target["description_text"]
            for source in sources:
                description = append_description(description, source["description_text"])
            change = {"target": target["subject_text"], "sources": [s["subject_text"] for s in sources]}
            target.update(
                created_at=min([target["created_at"], *(s["created_at"] for s in sources)]),
                last_seen_at=max([target["last_seen_at"], *(s["last_seen_at"] for s in sources)]),
                reinforcement_count=target["reinforcement_count"] + sum(s["reinforcement_count"] for s in sources),
                importance=max([float(target["importance"]), *(float(s["importance"]) for s in sources)]),
                description_text=description,
                link_count=target["link_count"] + sum(s["link_count"] for s in sources))
            for source in sources:
                self._leave(source)
            return change | {"apply": {"target": dict(target), "sources": source_ids}}
        if isinstance(m, RenameSubject):
            subject = self._subject(m.subject)
            self._not_pinned(subject)
            clean = self._free_name(m.name, owner=subject["id"])
            if not is_grounded(clean, TextWords.of(subject["subject_text"], subject["description_text"])):
                raise _Refused(f"{clean!r} is not grounded in {subject['subject_text']!r}'s name or descriptions")
            before = subject["subject_text"]
            if self.names.get(before.casefold()) == subject["id"]:
                del self.names[before.casefold()]
            subject["subject_text"] = clean
            self.names[clean.casefold()] = subject["id"]
            return {"before": before, "after": clean}
        if isinstance(m, UpdateDescription):
            subject = self._subject(m.subject)
            self._not_pinned(subject)
            subject["description_text"] = m.description.strip()
            return {"subject": subject["subject_text"], "description": m.description.strip()}
        if isinstance(m, ArchiveSubject):
            subject = self._subject(m.subject)
            self._archivable(subject)
            self._leave(subject)
            return {"subject": subject["subject_text"], "reason": m.reason}
        if isinstance(m, SupersedeSubject):
            old, new = self._subject(m.old), self._subject(m.new)
            if old["id"] == new["id"]:
                raise _Refused("a subject cannot supersede itself")
            self._archivable(old)
            self._leave(old)
            return {"old": old["subject_text"], "new": new["subject_text"], "reason": m.reason}
        if isinstance(m, CreateSubject):
            clean = self._free_name(m.name)
            if not is_grounded(clean, self.memory_words):
                raise _Refused(f"{clean!r} is not grounded in any subject's name or descriptions")
            self.creates += 1
            placeholder = f"new:{self.creates}"
            self.names[clean.casefold()] = placeholder
            return {"name": clean, "type": m.type if m.type in SUBJECT_TYPES else "other",
                    "description": m.description.strip()}
        raise _Refused(f"unsupported mutation {type(m).__name__}")


class _Refused(Exception):
    pass


def names_to_embed(outcomes: list[Outcome]) -> list[str]:
    return sorted({o.change["after"] if o.mutation["op"] == "rename_subject" else o.change["name"]
                   for o in outcomes if o.status == "accepted" and o.mutation["op"] in ("rename_subject", "create_subject")})


def apply_checked(conn: psycopg.Connection, outcomes: list[Outcome], *, user_id: str, kg_id: str,
                  embeddings: dict[str, object]) -> int:
    """Write every accepted mutation (inside the caller's transaction); return how many were applied."""
    applied = 0
    scope = {"user_id": user_id, "kg_id": kg_id}
    for outcome in outcomes:
        if outcome.status != "accepted":
            continue
        apply_one(conn, outcome, scope, embeddings)
        outcome.status = "applied"
        applied += 1
    return applied


def apply_one(conn: psycopg.Connection, outcome: Outcome, scope: dict, embeddings: dict[str, object]) -> None:
    m, change = outcome.mutation, outcome.change
    op = m["op"]
    if op == "merge_subjects":
        target, sources = change["apply"]["target"], change["apply"]["sources"]
        conn.execute(load_sql("dreaming/update_merge_target"), scope | {
            "id": target["id"], "created_at": target["created_at"], "last_seen_at": target["last_seen_at"],
            "reinforcement_count": target["reinforcement_count"], "importance": target["importance"],
            "description": target["description_text"]})
        conn.execute(load_sql("dreaming/copy_links"), scope | {"target": target["id"], "sources": sources})
        for source in sources:
            conn.execute(load_sql("dreaming/archive_subject"), scope | {
                "id": source, "reason": f"merged: {m.get('reason') or 'same subject'}", "merged_into": target["id"],
                "superseded_by": None})
    elif op == "rename_subject":
        conn.execute(load_sql("dreaming/rename_subject"), scope | {
            "id": m["subject"], "name": change["after"], "embedding": embeddings[change["after"]]})
    elif op == "update_description":
        conn.execute(load_sql("dreaming/update_description"), scope | {
            "id": m["subject"], "description": change["description"]})
    elif op == "archive_subject":
        conn.execute(load_sql("dreaming/archive_subject"), scope | {
            "id": m["subject"], "reason": m["reason"], "merged_into": None, "superseded_by": None})
    elif op == "supersede_subject":
        conn.execute(load_sql("dreaming/archive_subject"), scope | {
            "id": m["old"], "reason": f"superseded: {m.get('reason') or ''}".strip(), "merged_into": None,
            "superseded_by": m["new"]})
    elif op == "create_subject":
        row = conn.execute(load_sql("dreaming/create_subject"), scope | {
            "name": change["name"], "description": change["description"], "subject_type": change["type"],
            "embedding": embeddings[change["name"]]}).fetchone()
        change["id"] = row["id"]
