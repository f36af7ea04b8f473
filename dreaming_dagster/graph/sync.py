"""The whole pipeline for one user, in process: what every Dagster stage runs, and the fast path.

``sync_user`` lets an agent that just saved a fact read it back on its next turn without waiting for the
sensor's 30-second window: same stage functions, same per-user lock, no Dagster run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.extraction.providers import Extractor
from dreaming_dagster.graph import stages
from dreaming_dagster.graph.merging import merge_ratio
from dreaming_dagster.ingest.embedding import embed_pending_pairs
from dreaming_dagster.ingest.records import validate_identifier
from dreaming_dagster.refinement import Refiner
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.storage.database import Database


@dataclass
class SyncResult:
    user_id: str
    embedded: int = 0
    extraction: dict = field(default_factory=dict)
    merge: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)
    refinement: dict = field(default_factory=dict)
    seconds: float = 0.0


def sync_user(user_id: str, *, database: Database | None = None, embedder: Embedder | None = None,
              extractor: Extractor | None = None, refiner: Refiner | None = None,
              kg_id: str | None = None, threshold: float | None = None) -> SyncResult:
    """Run every dreaming stage for ``user_id`` now (all of the user's graphs, or just ``kg_id``)."""
    from dreaming_dagster.llm.factory import extractor_from_settings, refiner_from_settings
    from dreaming_dagster.runtime import default_database, default_embedder, default_settings

    user_id = validate_identifier(user_id, "user_id")
    settings = default_settings()
    database = database or default_database()
    embedder = embedder or default_embedder()
    extractor = extractor or extractor_from_settings(settings)
    refiner = refiner or refiner_from_settings(settings)
    threshold = threshold or settings.merge_threshold
    started = time.perf_counter()
    result = SyncResult(user_id=user_id)
    database.ensure_schema(embedder.spec)
    kgs = [validate_identifier(kg_id, "kg_id")] if kg_id else stages.user_kgs(database, user_id)
    for kg in kgs:
        with stages.user_graph_lock(database, user_id, kg):
            result.embedded += embed_pending_pairs(database, embedder, user_id).embedded
            stages.accumulate(result.extraction, stages.extract_pending(database, extractor, user_id, kg))
            stages.accumulate(result.merge, stages.merge_pending(database, embedder, user_id, kg, threshold=threshold))
            stages.accumulate(result.links, stages.link_pending(database, embedder, user_id, kg, threshold=threshold))
            stages.accumulate(result.refinement, stages.refine_pending(database, refiner, embedder, user_id, kg))
            refresh_profile(database, user_id, kg)
    result.merge["merge_ratio"] = merge_ratio(result.merge.get("created", 0), result.merge.get("merged", 0))
    result.seconds = round(time.perf_counter() - started, 3)
    return result
