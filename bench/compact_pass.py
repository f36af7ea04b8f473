"""A dreamed graph cleaned by one offline compact pass: the offline extractor's graph of LongMemEval
conversations, before and after `dreaming dream trigger --compact` with the offline consolidator.

    .venv/bin/python bench/compact_pass.py [--questions 60]

Dreams the oracle's first N questions' sessions (one user) with the offline extractor, then runs one compact
pass of the offline consolidator and reports the graph's health before and after (subjects, singleton share, generic subjects) and what the pass
archived (by reason) and merged. Writes bench/results/compact_pass.json.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from common import (  # first: puts the project on the import path
    ORACLE,
    bench_parser,
    embedded_admin_url,
    machine,
    stopped_on_exit,
)

from dreaming_dagster.consolidation.consolidators import OfflineConsolidator
from dreaming_dagster.consolidation.passes import PassPolicy, run_pass
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training.memory import load_benchmark_memory


def shape(database: Database, user_id: str) -> dict:
    (report,) = graph_reports.graph_report(database, user_id)
    return {"subjects": report["subjects"], "singleton_share": round(report["singleton_share"], 4),
            "generic_subjects": report["generic_subjects"], "generic_examples": report["generic_examples"],
            "largest_subject": report["largest_subject"], "largest_share": round(report["largest_share"], 4)}


def main() -> None:
    parser = bench_parser(__doc__, "compact_pass")
    parser.add_argument("--dataset", type=Path, default=ORACLE)
    parser.add_argument("--questions", type=int, default=60)
    args = parser.parse_args()
    embedder = LocalMiniLMEmbedder()
    with tempfile.TemporaryDirectory(prefix="dd-compact-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        database = Database(embedded.fresh_database_url(embedded_admin_url(Path(tmp) / "pgdata"),
                                                          "compact"))
        manifest = load_benchmark_memory(database, embedder, OfflineExtractor(), OfflineRefiner(), args.dataset,
                                         mode="one-user", user_prefix="old", limit=args.questions)
        (user,) = set(manifest.users.values())
        before = shape(database, user)
        report = run_pass(database, embedder, OfflineConsolidator(), user, mode="compact",
                          policy=PassPolicy(backfill_on_first_run=False))
        after = shape(database, user)
    applied = [o for o in report.outcomes if o.status == "applied"]
    archived = Counter(o.mutation.get("reason", "").split(" (")[0]
                       for o in applied if o.mutation.get("op") == "archive_subject")
    merges = [o for o in applied if o.mutation.get("op") == "merge_subjects"]
    results = {"command": "bench/compact_pass.py " + " ".join(sys.argv[1:]),
               "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
               "dataset": args.dataset.name, "questions": args.questions, "pairs": manifest.counts["pairs_inserted"],
               "before": before, "after": after, "pass_status": report.status,
               "archived_by_reason": dict(archived.most_common()), "merges": len(merges),
               "merge_examples": [f"{', '.join(o.change.get('sources', []))} → {o.change.get('target')}"
                                  for o in merges[:10]],
               "archive_examples": [o.change.get("subject")
                                    for o in applied if o.mutation.get("op") == "archive_subject"][:40],
               "skipped": report.count("skipped"),
               "summary": report.summary, "seconds": report.seconds}
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
