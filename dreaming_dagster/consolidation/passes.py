"""One consolidation pass for one user's graph: read, propose, check, apply — in one transaction — and
remember.

The pass holds the user's graph lock throughout, so the dreaming pipeline never writes the graph while a
pass reasons about it (one writer at a time). Everything it writes — mutations, decay, the audit row, the
dreamer's memory pair and the token counter — commits together or not at all; a failed pass leaves the
graph and the counter as they were and records a failed audit row.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from psycopg.types.json import Jsonb

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.consolidation.apply import GraphState, Outcome, apply_checked, names_to_embed
from dreaming_dagster.consolidation.consolidators import Consolidator
from dreaming_dagster.consolidation.inputs import (
    PassInput,
    compact_clusters,
    cross_cluster_input,
    incremental_input,
    input_fingerprint,
)
from dreaming_dagster.consolidation.mutations import parse_mutations
from dreaming_dagster.consolidation.rules import DecayPolicy, Protection
from dreaming_dagster.embeddings import Embedder, subject_embedding_text
from dreaming_dagster.ingest.tokens import count_tokens
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import DREAM_SESSION
from dreaming_dagster.storage.storable import clean_json, clean_text
from dreaming_dagster.storage.user_graphs import user_graph_lock

logger = logging.getLogger(__name__)
MODES = ("auto", "incremental", "compact")


@dataclass(frozen=True)
class PassPolicy:
    max_input_tokens: int = 32_000
    backfill_on_first_run: bool = True
    force_after_days: float = 7.0
    decay: DecayPolicy = field(default_factory=DecayPolicy)
    protection: Protection = field(default_factory=Protection)

    @classmethod
    def from_settings(cls, settings: DreamingSettings) -> PassPolicy:
        return cls(max_input_tokens=settings.dream_max_input_tokens,
                   backfill_on_first_run=settings.dream_backfill_on_first_run,
                   force_after_days=settings.dream_force_after_days,
                   decay=DecayPolicy(settings.decay_grace_days, settings.decay_half_life_days, settings.decay_floor))


@dataclass
class PassReport:
    user_id: str
    kg_id: str
    mode: str
    provider: str
    status: str  # applied | unchanged | failed
    pass_id: str | None = None
    input_tokens: int = 0
    tokens_consumed: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    decayed: int = 0
    summary: str = ""
    seconds: float = 0.0
    error: str | None = None
    inputs_taken: list[PassInput] = field(default_factory=list)  # the provider inputs, in the order taken
    inputs: list[tuple[list[str], list[str]]] = field(default_factory=list)  # each one's subject and pair ids

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def skipped(self) -> int:
        return self.count("skipped") + len(self.rejected)

    def audit_mutations(self) -> list[dict]:
        rows = [o.as_dict() for o in self.outcomes]
        for row in rows:
            row["change"] = {k: v for k, v in row["change"].items() if k != "apply"}
        rows += [{"mutation": r["mutation"], "status": "rejected", "reason": r["reason"]} for r in self.rejected]
        # Whatever a provider proposed, the audit row must be storable (jsonb holds no NUL, NaN or surrogate).
        return clean_json(json.loads(json.dumps(rows, default=str)))

    def diff_markdown(self) -> str:
        """The before/after of the graph, for the Dagster UI and the CLI."""
        lines = [f"**{self.status}** · {self.mode} pass · provider {self.provider} · input {self.input_tokens:,} "
                 f"tokens · consumed {self.tokens_consumed:,} saved tokens · applied {self.count('applied')}, "
                 f"skipped {self.skipped} · importance decayed on {self.decayed} subject(s) · {self.seconds} s"]
        sections = {"merge_subjects": ("Merged", lambda c: f"{', '.join(c['sources'])} → **{c['target']}**"),
                    "rename_subject": ("Renamed", lambda c: f"{c['before']} → **{c['after']}**"),
                    "update_description": ("Descriptions rewritten", lambda c: f"**{c['subject']}**: {c['description'][:160]}"),
                    "archive_subject": ("Archived", lambda c: f"{c['subject']} ({c['reason']})"),
                    "supersede_subject": ("Superseded", lambda c: f"{c['old']} → **{c['new']}** ({c['reason']})"),
                    "create_subject": ("Created", lambda c: f"**{c['name']}** ({c['type']})")}
        done = [o for o in self.outcomes if o.status == "applied"]
        for op, (title, render) in sections.items():
            items = [render(o.change) for o in done if o.mutation["op"] == op]
            if items:
                lines += ["", f"### {title} ({len(items)})", *[f"- {item}" for item in items]]
        refused = [o for o in self.outcomes if o.status == "skipped"] + [
            Outcome(r["mutation"] if isinstance(r["mutation"], dict) else {"op": "?"}, "rejected", r["reason"])
            for r in self.rejected]
        if refused:
            lines += ["", f"### Skipped ({len(refused)})",
                      *[f"- `{o.mutation.get('op', '?')}`: {o.reason}" for o in refused]]
        if self.summary:
            lines += ["", f"> {self.summary}"]
        return "\n".join(lines)


def _subjects(conn, user_id: str, kg_id: str) -> list[dict]:
    rows = conn.execute(load_sql("dreaming/live_subjects"), {"user_id": user_id, "kg_id": kg_id}).fetchall()
    subjects = [dict(row) for row in rows]
    for s in subjects:
        vector = s["embedding"]
        if vector is not None:
            s["embedding"] = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, np.float32)
    return subjects


def run_pass(database: Database, embedder: Embedder, consolidator: Consolidator, user_id: str,
             kg_id: str = "default", *, mode: str = "auto", force: bool = False,
             policy: PassPolicy | None = None, now: datetime | None = None) -> PassReport:
    """Run one pass (``mode`` auto: compact on a first pass when backfill_on_first_run, else incremental)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    policy = policy or PassPolicy()
    database.ensure_schema(embedder.spec)
    started_wall = time.perf_counter()
    with user_graph_lock(database, user_id, kg_id) as live:
        if not live:  # erased (or never saved): a pass would write an audit, a state and a summary naming the user
            return PassReport(user_id, kg_id, mode, consolidator.provider, "unchanged",
                              summary="the graph holds no memory; nothing recorded")
        return _run_locked(database, embedder, consolidator, user_id, kg_id, mode, force, policy, now, started_wall)


def _run_locked(database, embedder, consolidator, user_id, kg_id, mode, force, policy, now, started_wall):
    with database.connect() as conn:
        now = now or datetime.now(UTC)
        state = conn.execute(load_sql("dreaming/state"), {"user_id": user_id, "kg_id": kg_id}).fetchone() or {}
        consumed = int(state.get("tokens_since_last_pass") or 0)
        last_pass_at = state.get("last_pass_at")
        if mode == "auto":
            mode = "compact" if last_pass_at is None and policy.backfill_on_first_run else "incremental"
        report = PassReport(user_id, kg_id, mode, consolidator.provider, "applied", tokens_consumed=consumed)
        snapshot = _subjects(conn, user_id, kg_id)
        summary_rows = conn.execute(load_sql("dreaming/recent_summaries"), {
            "user_id": user_id, "kg_id": kg_id, "dream_session": DREAM_SESSION, "since": last_pass_at,
            "limit": 300}).fetchall()
        dream_rows = conn.execute(load_sql("dreaming/previous_dreams"), {
            "user_id": user_id, "kg_id": kg_id, "dream_session": DREAM_SESSION, "limit": 3}).fetchall()
    summaries, dreams = [r["summary"] for r in summary_rows], [r["summary"] for r in dream_rows]
    # Which pairs each quoted text came from: a forget undoes what a pass wrote after reading them.
    quoted_pairs: dict[str, set[str]] = {}
    for row in [*summary_rows, *dream_rows]:
        quoted_pairs.setdefault(row["summary"], set()).add(str(row["id"]))

    # The provider is called with no connection held: a slow model never holds one of the pool's.
    state_graph = GraphState(snapshot, policy.protection)
    if mode == "incremental":
        inputs = [incremental_input(snapshot, last_pass_at, summaries, dreams, policy.max_input_tokens)]
        fingerprint = input_fingerprint(inputs)
        fresh = last_pass_at is not None and now - last_pass_at < timedelta(days=policy.force_after_days)
        nothing_new = not inputs[0].changed and not inputs[0].summaries
        if not force and fresh and (nothing_new or fingerprint == state.get("last_input_hash")):
            report.status, report.tokens_consumed = "unchanged", 0
            report.summary = "input unchanged since the last pass; nothing to reconsider"
            _record(database, report, started_at=now)
            report.seconds = round(time.perf_counter() - started_wall, 3)
            return report
        proposals = [(inputs[0], _proposal(database, report, consolidator, inputs[0], now))]
    else:
        clusters = compact_clusters(snapshot, int(policy.max_input_tokens * 0.7))
        inputs = [PassInput("compact", f"cluster {i + 1}/{len(clusters)}", cluster,
                            summaries if i == 0 else [], dreams) for i, cluster in enumerate(clusters)]
        fingerprint = input_fingerprint(inputs)
        proposals = [(pass_input, _proposal(database, report, consolidator, pass_input, now)) for pass_input in inputs]
    summaries_out: list[str] = []
    for pass_input, proposal in proposals:
        _take(report, state_graph, pass_input, proposal, summaries_out)
    if mode == "compact":
        across = cross_cluster_input(clusters, set(state_graph.live), dreams, policy.max_input_tokens)
        if across is not None:
            # The across-clusters pass sees the graph as the cluster passes left it.
            across.subjects = [state_graph.live[s["id"]] for s in across.subjects if s["id"] in state_graph.live]
            _take(report, state_graph, across, _proposal(database, report, consolidator, across, now), summaries_out)
    report.inputs = [(sorted({str(s["id"]) for s in i.subjects}),
                      sorted(set().union(*(quoted_pairs.get(t, set()) for t in [*i.summaries, *i.previous_dreams]))))
                     for i in report.inputs_taken]
    report.summary = clean_text(" ".join(summaries_out))
    for outcome in report.outcomes:
        if outcome.status == "skipped":
            logger.info("%s/%s: skipped %s: %s", user_id, kg_id, outcome.mutation.get("op"), outcome.reason)
    for rejected in report.rejected:
        logger.info("%s/%s: rejected %s: %s", user_id, kg_id, rejected["mutation"], rejected["reason"])

    names = names_to_embed(report.outcomes)
    vectors = embedder.embed([subject_embedding_text(n) for n in names]) if names else np.zeros((0, 1))
    embeddings = dict(zip(names, vectors, strict=True))
    try:
        with database.connect() as conn, conn.transaction():
            _apply(conn, report, embeddings, policy, now)
            pass_id = _record_in(conn, report, started_at=now)
            _record_provenance(conn, report, pass_id)
            _remember(conn, report, now)
            conn.execute(load_sql("dreaming/finish_pass"), {
                "user_id": user_id, "kg_id": kg_id, "pass_id": pass_id, "input_hash": fingerprint,
                "consumed": report.tokens_consumed})
            report.pass_id = str(pass_id)
    except Exception as error:
        _fail(database, report, error, now)
    report.seconds = round(time.perf_counter() - started_wall, 3)
    return report


def _proposal(database: Database, report: PassReport, consolidator: Consolidator, pass_input: PassInput,
              now: datetime):
    """The provider's answer to one input; a provider that fails fails the pass, audited like a failed apply."""
    try:
        return consolidator.propose(pass_input)
    except Exception as error:
        _fail(database, report, error, now)


def _fail(database: Database, report: PassReport, error: Exception, now: datetime):
    """Record the pass as failed (nothing of it applied, no tokens consumed) and raise PassFailedError."""
    for outcome in report.outcomes:
        if outcome.status in ("accepted", "applied"):
            outcome.status = "failed"
    report.status, report.error, report.decayed = "failed", f"{type(error).__name__}: {error}", 0
    report.tokens_consumed = 0
    _record(database, report, started_at=now)
    logger.exception("dreaming pass for %s/%s failed and was rolled back", report.user_id, report.kg_id)
    raise PassFailedError(report) from error


def _take(report: PassReport, graph: GraphState, pass_input: PassInput, proposal, summaries: list[str]) -> None:
    """Parse one provider answer and check its mutations against the graph as earlier ones left it."""
    report.input_tokens += pass_input.tokens
    mutations, rejected = parse_mutations(proposal.mutations)
    report.rejected += rejected
    outcomes = [graph.check(m) for m in mutations]
    for outcome in outcomes:
        outcome.input_index = len(report.inputs_taken)
    report.outcomes += outcomes
    report.inputs_taken.append(pass_input)
    if proposal.summary:
        summaries.append(proposal.summary)


class PassFailedError(RuntimeError):
    def __init__(self, report: PassReport):
        self.report = report
        super().__init__(f"dreaming pass for {report.user_id}/{report.kg_id} rolled back: {report.error}")


def _apply(conn, report: PassReport, embeddings: dict, policy: PassPolicy, now: datetime) -> None:
    apply_checked(conn, report.outcomes, user_id=report.user_id, kg_id=report.kg_id, embeddings=embeddings)
    if policy.decay.half_life_days > 0:
        result = conn.execute(load_sql("dreaming/decay"), {
            "user_id": report.user_id, "kg_id": report.kg_id, "grace_days": policy.decay.grace_days,
            "half_life_days": policy.decay.half_life_days, "floor": policy.decay.floor, "now": now})
        report.decayed = result.rowcount


def _audit_params(report: PassReport, started_at: datetime) -> dict:
    return {"user_id": report.user_id, "kg_id": report.kg_id, "mode": report.mode, "provider": report.provider,
            "status": report.status, "started_at": started_at, "input_tokens": report.input_tokens,
            "tokens_consumed": report.tokens_consumed, "applied": report.count("applied"),
            "skipped": report.skipped, "failed": report.count("failed"), "decayed": report.decayed,
            "mutations": Jsonb(report.audit_mutations()), "summary": clean_text(report.summary),
            "error": clean_text(report.error) if report.error else None}


def _record_in(conn, report: PassReport, started_at: datetime):
    return conn.execute(load_sql("dreaming/insert_pass"), _audit_params(report, started_at)).fetchone()["id"]


def _record_provenance(conn, report: PassReport, pass_id) -> None:
    """What each input showed (ids), and on each subject a pass wrote, the input whose mutation wrote it."""
    written = [(o.text_written_to, o.input_index) for o in report.outcomes if o.text_written_to]
    if not written:
        return
    ids = {index: uuid.uuid4() for _, index in written}
    conn.execute(load_sql("dreaming/insert_pass_inputs"), {
        "pass_id": pass_id, "user_id": report.user_id, "kg_id": report.kg_id, "ids": list(ids.values()),
        "subject_ids": [_id_array(report.inputs[n][0]) for n in ids],
        "pair_ids": [_id_array(report.inputs[n][1]) for n in ids]})
    conn.execute(load_sql("dreaming/mark_consolidated_by"), {
        "user_id": report.user_id, "kg_id": report.kg_id, "subject_ids": [subject for subject, _ in written],
        "input_ids": [ids[index] for _, index in written]})


def _id_array(ids: list[str]) -> str:
    """A uuid[] literal: one row a parameter array of arrays cannot carry when the arrays differ in length."""
    return "{" + ",".join(ids) + "}"


def _record(database: Database, report: PassReport, started_at: datetime) -> None:
    with database.connect() as conn:
        report.pass_id = str(_record_in(conn, report, started_at))


def _remember(conn, report: PassReport, now: datetime) -> None:
    """The dreamer remembers: the pass's summary as a memory pair of the reserved dream session."""
    question = f"[{report.mode} dreaming pass, {now:%Y-%m-%d %H:%M} UTC] What did you consolidate?"
    answer = (f"{report.summary} Applied {report.count('applied')}, skipped {report.skipped}, decayed "
              f"{report.decayed}.").strip()
    digest = hashlib.sha256(f"{report.user_id}\x1f{now.astimezone(UTC).isoformat()}\x1f{answer}".encode()).hexdigest()
    conn.execute(load_sql("dreaming/insert_dream_pair"), {
        "user_id": report.user_id, "kg_id": report.kg_id, "session_id": DREAM_SESSION, "user_message": question,
        "assistant_message": answer, "token_count": count_tokens(question, answer), "content_hash": digest,
        "metadata": Jsonb({"source": "dreaming_pass", "mode": report.mode})})


class RestoreError(ValueError):
    pass


def restore_subject(database: Database, user_id: str, kg_id: str, subject_id: str) -> dict:
    """Bring an archived subject of this user back to the live graph, with the links it kept."""
    import psycopg

    with user_graph_lock(database, user_id, kg_id), database.connect() as conn:
        try:
            row = conn.execute(load_sql("dreaming/restore_subject"),
                               {"user_id": user_id, "kg_id": kg_id, "id": subject_id}).fetchone()
        except psycopg.errors.UniqueViolation:
            raise RestoreError(f"subject {subject_id}: a live subject already has its name; rename or merge that "
                               "one first") from None
        except psycopg.errors.InvalidTextRepresentation:
            raise RestoreError(f"subject {subject_id!r} is not a subject id") from None
    if row is None:
        raise RestoreError(f"subject {subject_id} is not an archived subject of {user_id}/{kg_id}")
    return dict(row)


def dream_status(database: Database, user_id: str, kg_id: str, limit: int = 5) -> tuple[dict, list[dict]]:
    with database.connect() as conn:
        state = conn.execute(load_sql("dreaming/state"), {"user_id": user_id, "kg_id": kg_id}).fetchone() or {}
        passes = conn.execute(load_sql("dreaming/recent_passes"),
                              {"user_id": user_id, "kg_id": kg_id, "limit": limit}).fetchall()
    return dict(state), [dict(p) for p in passes]
