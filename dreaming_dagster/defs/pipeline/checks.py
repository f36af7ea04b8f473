"""Asset checks of a user's graph, evaluated with each materialization (they are per partition)."""

import dagster as dg

from dreaming_dagster.hubs import MEGA_NODE_MAX_SHARE, MEGA_NODE_MIN_PAIRS
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import user_graphs
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.user_graphs import extraction_retry_params

PARKED_PAIRS_CHECK = "no_parked_pairs"
MEGA_NODE_CHECK = "no_mega_node"
ORPHAN_CHECK = "no_orphan_pairs"
DUPLICATE_CHECK = "no_duplicate_subjects"


def mega_node_check(database: Database, user_id: str) -> dg.AssetCheckResult:
    with database.connect(vectors=False) as conn:
        row = conn.execute(load_sql("checks/mega_node"), {"user_id": user_id}).fetchone()
    applies = row["pairs"] >= MEGA_NODE_MIN_PAIRS
    return dg.AssetCheckResult(
        check_name=MEGA_NODE_CHECK, asset_key="subject_links",
        passed=not applies or row["share"] <= MEGA_NODE_MAX_SHARE,
        metadata={"pairs": row["pairs"], "largest_subject": row["subject_text"] or "",
                  "linked_pairs": row["linked"], "share": round(float(row["share"]), 3),
                  "max_share": MEGA_NODE_MAX_SHARE, "applies_from_pairs": MEGA_NODE_MIN_PAIRS})


def orphan_pairs_check(database: Database, user_id: str) -> dg.AssetCheckResult:
    with database.connect(vectors=False) as conn:
        orphans = conn.execute(load_sql("checks/orphan_pairs"), {
            "user_id": user_id, "kg_ids": user_graphs.user_kgs(database, user_id)}).fetchone()["orphans"]
    return dg.AssetCheckResult(check_name=ORPHAN_CHECK, asset_key="subject_links", passed=orphans == 0,
                               metadata={"orphan_pairs": orphans})


def duplicate_subjects_check(database: Database, user_id: str) -> dg.AssetCheckResult:
    with database.connect(vectors=False) as conn:
        duplicates = conn.execute(load_sql("checks/duplicate_subjects"), {"user_id": user_id}).fetchall()
    return dg.AssetCheckResult(
        check_name=DUPLICATE_CHECK, asset_key="subjects", passed=not duplicates,
        metadata={"duplicated_names": len(duplicates),
                  "examples": ", ".join(f"{d['name']} ×{d['copies']}" for d in duplicates[:5])})


def parked_pairs_check(database: Database, user_id: str) -> dg.AssetCheckResult:
    """Pairs whose extraction failed every attempt (a provider outage, or a pair the model cannot answer):
    a warning, not an error — they are retried after the cool-down, or now with `dreaming retry-failed`."""
    with database.connect(vectors=False) as conn:
        row = conn.execute(load_sql("checks/failed_extractions"),
                           {"user_id": user_id, **extraction_retry_params()}).fetchone()
    return dg.AssetCheckResult(
        check_name=PARKED_PAIRS_CHECK, asset_key="pair_subjects", passed=row["parked"] == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"parked_pairs": row["parked"], "last_error": (row["last_error"] or "")[:500],
                  "next_retry_at": str(row["next_retry_at"] or "–"),
                  "retry_now": f"dreaming retry-failed --user {user_id}"})
