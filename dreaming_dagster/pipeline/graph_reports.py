"""Reading a user's graph back: counts, health, drift, the shape report and the most linked subjects
(checks, the CLI, the demo and the benches)."""

from __future__ import annotations

from collections.abc import Collection

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.user_graphs import (
    scoped_kgs,
)


def graph_stats(database: Database, user_id: str) -> dict:
    with database.connect(vectors=False) as conn:
        return dict(conn.execute(load_sql("pipeline/graph_stats"), {"user_id": user_id}).fetchone())


def graph_signature(database: Database, user_id: str) -> set[tuple[str, tuple[str, ...]]]:
    """The user's graph as comparable data (subject name, linked pairs' content hashes): a resumed or
    rebuilt run must give the same set as an uninterrupted one."""
    with database.connect(vectors=False) as conn:
        rows = conn.execute(load_sql("checks/graph_signature"), {"user_id": user_id}).fetchall()
    return {(row["subject_text"], tuple(row["pairs"])) for row in rows}


def graph_health(database: Database, user_id: str, kg_ids: Collection[str] | None = None) -> dict[str, int]:
    """What must be zero once the user's graphs ``kg_ids`` (None: all of them) are dreamed: unfinished pairs,
    duplicate subjects and links, orphan pairs, unlinked subjects (crash-recovery tests and
    bench/reliability.py read it)."""
    params = {"user_id": user_id, "kg_ids": scoped_kgs(database, user_id, kg_ids)}
    with database.connect(vectors=False) as conn:
        health = dict(conn.execute(load_sql("checks/graph_health"), params).fetchone())
        health["orphan_pairs"] = conn.execute(load_sql("checks/orphan_pairs"), params).fetchone()["orphans"]
    return health


def memory_count_drift(database: Database, user_id: str | None = None) -> list[dict]:
    """Graphs (of ``user_id``, or all) whose stored pair or live-subject count differs from a count of their
    rows (migration 0024's triggers keep them equal): must be empty."""
    with database.connect(vectors=False) as conn:
        return conn.execute(load_sql("checks/memory_counts_drift"), {"user_id": user_id}).fetchall()


def graph_report(database: Database, user_id: str, kg_ids: Collection[str] | None = None) -> list[dict]:
    """The shape of each of the user's graphs ``kg_ids`` (None: all of them; checks/graph_report.sql) and the
    share of its live subjects on the committed generic list (extraction/generic_subjects.txt), each with
    the names found."""
    from dreaming_dagster.extraction.entities import is_generic

    params = {"user_id": user_id, "kg_ids": scoped_kgs(database, user_id, kg_ids)}
    with database.connect(vectors=False) as conn:
        reports = conn.execute(load_sql("checks/graph_report"), params).fetchall()
        names = conn.execute(load_sql("checks/live_subject_names"), params).fetchall()
    for report in reports:
        generic = sorted(row["subject_text"] for row in names
                         if row["kg_id"] == report["kg_id"] and is_generic(row["subject_text"]))
        report["generic_subjects"] = len(generic)
        report["generic_share"] = len(generic) / report["subjects"] if report["subjects"] else 0.0
        report["generic_examples"] = generic[:10]
    return reports


def top_subjects(database: Database, user_id: str, limit: int = 10) -> list[dict]:
    with database.connect(vectors=False) as conn:
        return conn.execute(load_sql("pipeline/top_subjects"), {"user_id": user_id, "limit": limit}).fetchall()
