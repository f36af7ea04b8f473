"""The dreaming stages in order, stated once, and the fast path that runs them in process.

:data:`STAGES` is the pipeline: each stage names the Dagster asset that runs it and the function it runs.
The assets in ``defs/pipeline`` take their lineage (each depends on the stage before) and their work from it,
and ``sync_user`` iterates it, so Dagster and the fast path cannot disagree on what dreaming is.

``sync_user`` lets an agent that just saved a fact read it back on its next turn without waiting for the
sensor's 30-second window: same stage functions, same per-user lock, no Dagster run. ``save_and_sync`` saves
and syncs in one call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from psycopg.types.json import Jsonb

from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.extraction.extractors import Extractor
from dreaming_dagster.hubs import (
    DEFAULT_HUB_RULE,
    MEGA_NODE_MAX_SHARE,
    MEGA_NODE_MIN_PAIRS,
    HubRule,
)
from dreaming_dagster.ingest.embedding import embed_pending_pairs
from dreaming_dagster.ingest.save import SaveResult, save_pairs
from dreaming_dagster.pipeline import batches, dating, extracting, graph_reports, keying, linking, refining
from dreaming_dagster.pipeline.merging import DEFAULT_THRESHOLD, merge_ratio
from dreaming_dagster.pipeline.refiners import Refiner
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import user_graphs
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import validate_identifier


@dataclass(frozen=True)
class StageInputs:
    """What the stages of one user need; a stage uses the parts it needs."""

    database: Database
    user_id: str
    # The graphs a user-wide stage (the embedding) covers: a tenant's sync names its own; None is every
    # graph of the user (Dagster's partition runs, which are the operator's).
    kg_ids: tuple[str, ...] | None = None
    embedder: Embedder | None = None
    extractor: Extractor | None = None
    refiner: Refiner | None = None
    threshold: float = DEFAULT_THRESHOLD
    hubs: HubRule = DEFAULT_HUB_RULE
    embedding_batch_size: int = 64
    # True (the Dagster assets): the link stage's janitor and hub rule read the whole graph. False (the fast
    # path): a stage reads only what its pending pairs need (linking.link_pending).
    whole_graph: bool = True


@dataclass(frozen=True)
class Stage:
    asset: str  # the Dagster asset that runs this stage for a user partition
    run: Callable[[StageInputs, str], object]  # (inputs, kg_id) -> the stage's stats
    result: str  # the SyncResult field its stats add up in
    per_graph: bool = True  # False: once per user, for all of the user's graphs, outside the graph lock


def _refine_and_refresh(inputs: StageInputs, kg_id: str):
    refined = refining.refine_pending(inputs.database, inputs.refiner, inputs.embedder, inputs.user_id, kg_id)
    refresh_profile(inputs.database, inputs.user_id, kg_id)  # subjects change only while dreaming
    return refined


STAGES: tuple[Stage, ...] = (
    Stage("memory_pairs", lambda s, kg: embed_pending_pairs(s.database, s.embedder, s.user_id, kg_ids=s.kg_ids,
                                                            batch_size=s.embedding_batch_size),
          "embedding", per_graph=False),
    Stage("pair_dates", lambda s, kg: dating.date_pending(s.database, s.user_id, kg), "dating"),
    Stage("pair_keys", lambda s, kg: keying.key_pending(s.database, s.embedder, s.user_id, kg), "keys"),
    Stage("pair_subjects", lambda s, kg: extracting.extract_pending(s.database, s.extractor, s.user_id, kg,
                                                                   embedder=s.embedder), "extraction"),
    Stage("subjects", lambda s, kg: linking.merge_pending(s.database, s.embedder, s.user_id, kg,
                                                         threshold=s.threshold), "merge"),
    Stage("subject_links", lambda s, kg: linking.link_pending(s.database, s.embedder, s.user_id, kg,
                                                             threshold=s.threshold, hubs=s.hubs,
                                                             whole_graph=s.whole_graph), "links"),
    Stage("refined_subjects", _refine_and_refresh, "refinement"),
)
STAGE_BY_ASSET = {stage.asset: stage for stage in STAGES}


def upstream_of(asset: str) -> list[str]:
    """The asset of the stage before ``asset`` (empty for the first)."""
    index = [stage.asset for stage in STAGES].index(asset)
    return [STAGES[index - 1].asset] if index else []


def run_stage(stage: Stage, inputs: StageInputs, kg_ids: list[str], totals: dict) -> None:
    """Run ``stage`` for the user (per graph under the graph's lock) and add its stats into ``totals``."""
    if not stage.per_graph:
        batches.accumulate(totals, stage.run(inputs, ""))
        return
    for kg_id in kg_ids:
        with user_graphs.user_graph_lock(inputs.database, inputs.user_id, kg_id) as live:
            if live:  # an erasure that took the lock first leaves nothing to run on
                batches.accumulate(totals, stage.run(inputs, kg_id))


@dataclass
class SyncResult:
    user_id: str
    embedding: dict = field(default_factory=dict)
    dating: dict = field(default_factory=dict)
    keys: dict = field(default_factory=dict)
    extraction: dict = field(default_factory=dict)
    merge: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)
    refinement: dict = field(default_factory=dict)
    graph: list[dict] = field(default_factory=list)  # graph_reports.graph_report after the run, per graph (report=True)
    warnings: list[str] = field(default_factory=list)  # what the graph checks found (graph_warnings)
    seconds: float = 0.0

    @property
    def embedded(self) -> int:
        return self.embedding.get("embedded", 0)


def graph_warnings(database: Database, user_id: str, reports: list[dict], kg_ids: list[str]) -> list[str]:
    """The graph checks the Dagster assets run, run after the fast path too: a subject over half of the
    pairs (the merge nightmare), duplicate live subjects, pairs stored without links, parked pairs."""
    warnings = []
    for r in reports:
        if r["pairs"] >= MEGA_NODE_MIN_PAIRS and r["largest_share"] > MEGA_NODE_MAX_SHARE:
            warnings.append(f"{r['kg_id']}: '{r['largest_subject']}' links {100 * r['largest_share']:.0f}% of the "
                            "pairs (a mega-node; flagged as a hub, it carries no ranking weight)")
    health = graph_reports.graph_health(database, user_id, kg_ids)
    for key, label in (("duplicate_subjects", "live subjects share a name"),
                       ("orphan_pairs", "pairs are stored without links although they have subjects"),
                       ("duplicate_links", "links are duplicated")):
        if health.get(key):
            warnings.append(f"{health[key]} {label}")
    return warnings


def sync_user(user_id: str, *, database: Database | None = None, embedder: Embedder | None = None,
              extractor: Extractor | None = None, refiner: Refiner | None = None,
              kg_id: str | None = None, threshold: float | None = None, report: bool = False) -> SyncResult:
    """Run every dreaming stage for ``user_id`` now (all of the user's graphs, or just ``kg_id``).

    The fast path reads only what the pending pairs need: each graph's lock is taken once for all its
    stages, the hub rule is checked for the subjects linked now and the current hubs, and a newly flagged
    hub is a warning. ``report=True`` reads the whole graph as the Dagster assets do — the link stage's
    janitor, the hub rule for every subject (a lowered DREAMING_GRAPH_HUB_SHARE takes effect), then the
    graph's shape (``SyncResult.graph``) and the graph checks — which costs time in proportion to the
    user's memory (`dreaming sync` asks for it; an agent between two turns usually does not)."""
    from dreaming_dagster.extraction.extractors import extractor_from_settings
    from dreaming_dagster.pipeline.refiners import refiner_from_settings
    from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings

    user_id = validate_identifier(user_id, "user_id")
    kg_id = validate_identifier(kg_id, "kg_id") if kg_id else None  # refused before any stage runs
    settings = default_settings()
    database = database or default_database()
    embedder = embedder or default_embedder()
    started = time.perf_counter()
    database.ensure_schema(embedder.spec)
    kgs = [kg_id] if kg_id else user_graphs.user_kgs(database, user_id)
    inputs = StageInputs(database=database, user_id=user_id, kg_ids=tuple(kgs), embedder=embedder,
                         extractor=extractor or extractor_from_settings(settings),
                         refiner=refiner or refiner_from_settings(settings),
                         threshold=threshold or settings.merge_threshold, hubs=HubRule.from_settings(settings),
                         embedding_batch_size=settings.embedding_batch_size, whole_graph=report)
    result = SyncResult(user_id=user_id)
    for stage in STAGES:
        if not stage.per_graph:
            run_stage(stage, inputs, [], getattr(result, stage.result))
    for kg in kgs:
        done = {stage.asset: getattr(result, stage.result) for stage in STAGES if not stage.per_graph}
        with user_graphs.user_graph_lock(database, user_id, kg) as live:
            if not live:  # erased since the graphs were listed: nothing may be written for it
                continue
            for stage in STAGES:
                if stage.per_graph:
                    stats = stage.run(inputs, kg)
                    batches.accumulate(getattr(result, stage.result), stats)
                    done[stage.asset] = batches.stats_dict(stats)
            record_fast_path_sync(database, user_id, kg, done)  # under the lock: an erasure cannot slip in before it
    result.merge["merge_ratio"] = merge_ratio(result.merge.get("created", 0), result.merge.get("merged", 0))
    result.warnings = [f"'{name}' is now a hub: linked to over {100 * inputs.hubs.share:.0f}% of the pairs, it "
                       "stays browsable and carries no ranking weight" for name in result.links.get("new_hubs", [])]
    if report:
        result.graph = graph_reports.graph_report(database, user_id, kgs)
        result.warnings += graph_warnings(database, user_id, result.graph, kgs)
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def record_fast_path_sync(database: Database, user_id: str, kg_id: str, done: dict[str, dict]) -> None:
    """Note a sync that did any work in ``fast_path_syncs`` (migration 0027), for Dagster's sensor to report
    as the user partition's asset events: the fast path runs no Dagster run, and the UI should not show its
    users as never dreamed."""
    if not any(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 and k != "seconds"
               for stats in done.values() for k, v in stats.items()):
        return
    with database.connect(vectors=False) as conn:
        conn.execute(load_sql("pipeline/record_fast_path_sync"),
                     {"user_id": user_id, "kg_id": kg_id, "stages": Jsonb(json.loads(json.dumps(done, default=str)))})


@dataclass
class SavedAndSynced:
    saved: SaveResult
    synced: SyncResult


def save_and_sync(user_id: str, pairs: Iterable[object], kg_id: str = "default", *, strict: bool = False,
                  database: Database | None = None, embedder: Embedder | None = None,
                  extractor: Extractor | None = None, refiner: Refiner | None = None,
                  threshold: float | None = None, report: bool = False) -> SavedAndSynced:
    """Save ``pairs`` in ``user_id``'s memory (:func:`~dreaming_dagster.ingest.save.save_pairs`) and dream
    the graph ``kg_id`` at once (:func:`sync_user`): what an agent calls after an exchange it wants in the
    graph by its next turn.

    Input is checked as ``save_pairs`` checks it: ``strict`` refuses the whole batch (BatchRejectedError)
    before anything is stored or dreamed; otherwise the valid pairs are saved and dreamed and the rest
    come back as rejections in ``saved.rejected``. The sync runs even when nothing new was stored (pairs
    still pending from earlier saves are dreamed)."""
    saved = save_pairs(user_id, pairs, kg_id, strict=strict, database=database, embedder=embedder)
    synced = sync_user(user_id, database=database, embedder=embedder, extractor=extractor, refiner=refiner,
                       kg_id=kg_id, threshold=threshold, report=report)
    return SavedAndSynced(saved=saved, synced=synced)
