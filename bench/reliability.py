"""The reliability guarantees under fire, measured: kills, concurrency, tenancy, hostile input, outages.

    .venv/bin/python bench/reliability.py [--kills 6] [--users 4] [--recalls 200] [--bulk-users 100000]

On a fresh embedded Postgres, with the local embedder and the offline providers:
- kill -9 mid-sync: `dreaming sync` subprocesses killed with SIGKILL half-way through a stage (merge or
  links: some of the user's pairs past it, not all), then run again: pairs lost, duplicate subjects, orphan pairs, and whether the
  graph equals an uninterrupted run of the same data;
- 4 syncs of one user at once (threads): duplicates and the same graph check;
- 16 concurrent savers of the same 1,800 pairs: each stored exactly once;
- a saving connection terminated mid-statement (pg_terminate_backend): all of its batch or none;
- random cross-tenant recalls: pairs returned that belong to another user;
- hostile records (NUL, lone surrogates, NaN, extreme dates …): each rejected with its field, the rest stored;
- an LLM endpoint that hangs or trickles a byte at a time: how long a call, and a sync, hold on;
- one INSERT … SELECT of pairs for --bulk-users users (the lexical index trigger's locks);
- after all of the above, every graph's stored pair and live-subject counts against a count of its rows.
Results: bench/results/reliability.json.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from common import (  # first: puts the project on the import path
    ORACLE,
    ROOT,
    bench_parser,
    bench_sql,
    embedded_admin_url,
    machine,
    stopped_on_exit,
)
from rich.console import Console
from rich.table import Table

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import embedder_from_settings
from dreaming_dagster.extraction.extractors import OfflineExtractor, OpenAIExtractor
from dreaming_dagster.extraction.schema import Extraction
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
    sessions_in_date_order,
)
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.llm.client import JSONChatClient, LLMCallError
from dreaming_dagster.pipeline import extracting, graph_reports, linking
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database

# Where a kill lands (bench/kill_moment.sql). The stages commit a batch at a time, so a kill lands either
# inside a stage's write transaction (which Postgres then rolls back) or between two committed stages.
KILL_APP = "dreaming-reliability-kill"  # the killed sync's connections, found by application_name
KILL_TRIES = 20  # a sync that finished before the moment came is run again, at most this many times
KILL_MOMENTS = ("inside", "between")  # the kills take turns: inside a write transaction, between two stages
HOSTILE = {
    "metadata NaN": {"metadata": {"v": float("nan")}}, "metadata Infinity": {"metadata": {"v": float("inf")}},
    "NUL in a metadata key": {"metadata": {"k\x00": 1}}, "NUL in a metadata value": {"metadata": {"k": "\x00"}},
    "NUL in session_id": {"session_id": "s\x00"}, "lone surrogate in session_id": {"session_id": "s\ud800"},
    "lone surrogate in a message": {"user_message": "caf\udce9"}, "NUL in a message": {"assistant_message": "a\x00"},
    "0001-01-01T00:00:00+01:00": {"occurred_at": "0001-01-01T00:00:00+01:00"},
    "9999-12-31T23:59:59-05:00": {"occurred_at": "9999-12-31T23:59:59-05:00"},
    "metadata nested 100 deep": {"metadata": {"v": json.loads("[" * 100 + "]" * 100)}},
}


def oracle_users(count: int, questions: int) -> list[list[dict]]:
    questions_all = list(iter_longmemeval_questions(ORACLE))
    users = []
    for index in range(count):
        chosen = questions_all[index::count][:questions]
        users.append([r.raw for r in longmemeval_session_records(sessions_in_date_order(chosen))
                      if isinstance(r, LineRecord)])
    return users


class _Endpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that misbehaves: hangs, or trickles its answer."""

    mode, pace = "hang", 1.0

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "hang":
            time.sleep(self.pace)
            return
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content":
                '{"summary": "' + "s" * 200 + '", "subjects": []}'}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for index in range(len(body)):
                self.wfile.write(body[index:index + 1])
                self.wfile.flush()
                time.sleep(self.pace)
        except (BrokenPipeError, ConnectionResetError):
            pass


def main() -> None:
    parser = bench_parser(__doc__, "reliability")
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--questions-per-user", type=int, default=4)
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--bulk-users", type=int, default=100_000)
    parser.add_argument("--savers", type=int, default=16)
    parser.add_argument("--saver-pairs", type=int, default=1800)
    parser.add_argument("--terminations", type=int, default=5)
    parser.add_argument("--termination-pairs", type=int, default=3000)
    parser.add_argument("--llm-deadline", type=float, default=5.0, help="seconds a misbehaving endpoint is given")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console, rng = Console(), random.Random(args.seed)
    # The local model the `dreaming sync` subprocesses below embed with (the shipped memory encoder by default).
    embedder = embedder_from_settings(DreamingSettings(embedding_batch_size=64))
    embedder.embed(["warm-up"])
    results: dict = {}

    def dream(db: Database, user: str):
        return sync_user(user, database=db, embedder=embedder, extractor=OfflineExtractor(), refiner=OfflineRefiner())

    with tempfile.TemporaryDirectory(prefix="dd-rel-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        url = embedded.fresh_database_url(admin_url, "reliability")
        database = Database(url)
        users = [f"user-{i}" for i in range(args.users)]
        for user, records in zip(users, oracle_users(args.users, args.questions_per_user), strict=True):
            save_pairs(user, records, database=database, embedder=embedder)
        console.print(f"{len(users)} users saved")

        # --- uninterrupted graphs, the reference for every check below
        reference = {}
        for user in users:
            dream(database, user)
            reference[user] = graph_reports.graph_signature(database, user)

        # --- kill -9 mid-sync
        env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_")}
        env.update(DREAMING_DATABASE_URL=url, DREAMING_LLM_PROVIDER="offline")
        kills = []
        env["PGAPPNAME"] = KILL_APP  # libpq names the sync's connections, so the moment to kill can be seen
        for index in range(args.kills):
            user, target = users[index % len(users)], KILL_MOMENTS[index % len(KILL_MOMENTS)]
            tries, reached = 0, None
            while not reached and tries < KILL_TRIES:
                tries += 1
                linking.clear_user_graph(database, user, "default")
                process = subprocess.Popen([sys.executable, "-m", "dreaming_dagster.cli", "sync", "--user", user],
                                           env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline, reached = time.monotonic() + 300, None
                with database.connect() as conn:
                    while time.monotonic() < deadline and process.poll() is None:
                        moment = conn.execute(bench_sql("kill_moment"), {
                            "user_id": user, "application_name": KILL_APP}).fetchone()["moment"]
                        if moment and moment.startswith(target):
                            reached = moment
                            break
                        time.sleep(0.002)
                process.send_signal(signal.SIGKILL)
                process.wait()
            # The bench's own assumption: every kill lands mid-sync. A sync too fast to catch means the kill
            # moments above no longer exist; the figures would then say nothing.
            assert reached, f"no sync of {user} could be killed {target} in {KILL_TRIES} tries"
            dream(database, user)
            health = graph_reports.graph_health(database, user)
            kills.append({"user": user, "killed_at": reached, "tries": tries, **health,
                          "graph_equals_uninterrupted": graph_reports.graph_signature(database, user) == reference[user]})
            console.print(f"kill {index + 1}: {kills[-1]}")
        results["kill_9_mid_sync"] = {
            "kills": len(kills), "users": len({k["user"] for k in kills}),
            "killed_inside_a_write_transaction": sum(1 for k in kills if k["killed_at"].startswith("inside")),
            "killed_between_stages": sum(1 for k in kills if k["killed_at"].startswith("between")),
            "lost_pairs": sum(k["unfinished_pairs"] for k in kills),
            "duplicate_subjects": sum(k["duplicate_subjects"] for k in kills),
            "duplicate_links": sum(k["duplicate_links"] for k in kills),
            "orphan_pairs": sum(k["orphan_pairs"] for k in kills),
            "graphs_equal_to_uninterrupted": sum(k["graph_equals_uninterrupted"] for k in kills), "runs": kills}

        # --- 4 syncs of one user at once
        user = users[0]
        linking.clear_user_graph(database, user, "default")
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda _: dream(database, user), range(4)))
        results["concurrent_syncs"] = {"syncs": 4, **graph_reports.graph_health(database, user),
                                       "graph_equals_uninterrupted": graph_reports.graph_signature(database, user) == reference[user]}
        console.print(f"concurrent syncs: {results['concurrent_syncs']}")

        # --- 16 concurrent savers of the same 1,800 pairs
        records = [{"session_id": f"c{i // 30}", "turn_index": i % 30, "user_message": f"concurrent message {i}",
                    "assistant_message": "ok", "occurred_at": "2024-05-01T10:00:00Z"} for i in range(args.saver_pairs)]

        def saver(seed: int) -> int:
            mine = records[:]
            random.Random(seed).shuffle(mine)
            return sum(save_pairs("savers", mine[start:start + 150], database=database, embedder=embedder,
                                  embed=False).inserted for start in range(0, len(mine), 150))

        with ThreadPoolExecutor(max_workers=args.savers) as pool:
            inserted = sum(pool.map(saver, range(args.savers)))
        with database.connect() as conn:
            stored = conn.execute("SELECT count(*) AS n, count(DISTINCT content_hash) AS d FROM memory_pairs "
                                  "WHERE user_id = 'savers'").fetchone()
        results["concurrent_savers"] = {"savers": args.savers, "pairs": len(records), "inserted_reported": inserted,
                                        "rows": stored["n"], "distinct": stored["d"]}
        console.print(f"concurrent savers: {results['concurrent_savers']}")

        # --- a saving connection terminated mid-statement
        terminations = []
        for attempt in range(args.terminations):
            batch = [{"session_id": f"t{attempt}", "turn_index": i, "user_message": f"terminated save {attempt} {i} " +
                      "words " * 40, "assistant_message": "reply " * 40, "occurred_at": "2024-05-01T10:00:00Z"}
                     for i in range(args.termination_pairs)]
            outcome: dict = {}

            def save_batch(batch=batch, outcome=outcome) -> None:
                try:
                    outcome["inserted"] = save_pairs("terminated", batch, database=database, embedder=embedder,
                                                     embed=False).inserted
                except Exception as error:  # the point: the connection is cut under it
                    outcome["error"] = type(error).__name__

            thread = threading.Thread(target=save_batch)
            thread.start()
            killed = False
            with database.connect() as conn:
                while thread.is_alive() and not killed:
                    killed = bool(conn.execute(
                        "SELECT pg_terminate_backend(pid) AS k FROM pg_stat_activity WHERE state = 'active' "
                        "AND pid <> pg_backend_pid() AND query LIKE '%%INSERT INTO memory_pairs%%'").fetchall())
                    time.sleep(0.005)
            thread.join()
            with database.connect() as conn:
                rows = conn.execute("SELECT count(*) AS n FROM memory_pairs WHERE user_id = 'terminated' "
                                    "AND session_id = %s", (f"t{attempt}",)).fetchone()["n"]
            terminations.append({"terminated": killed, "rows": rows, "batch": len(batch), **outcome})
        results["terminated_saves"] = {
            "saves": len(terminations), "terminated_mid_statement": sum(t["terminated"] for t in terminations),
            "all_or_nothing": sum(t["rows"] in (0, t["batch"]) for t in terminations), "runs": terminations}
        console.print(f"terminated saves: {results['terminated_saves']}")

        # --- cross-tenant recalls
        recaller = Recaller(database, embedder)
        owners = {}
        with database.connect() as conn:
            for row in conn.execute("SELECT id, user_id FROM memory_pairs"):
                owners[str(row["id"])] = row["user_id"]
        questions = [q["question"] for q in iter_longmemeval_questions(ORACLE)][:400]
        leaks = returned = 0
        for _ in range(args.recalls):
            asker = rng.choice(users)
            result = recaller.recall(asker, rng.choice(questions), k=rng.randint(1, 50),
                                     session_id=rng.choice([None, "c1", "answer_4be1b6b4_1"]))
            returned += len(result)
            leaks += sum(owners[m.pair_id] != asker for m in result)
        recaller.close()
        results["cross_tenant_recalls"] = {"recalls": args.recalls, "memories_returned": returned, "leaks": leaks}
        console.print(f"cross-tenant recalls: {results['cross_tenant_recalls']}")

        # --- hostile records
        good = {"session_id": "h", "user_message": "a good record", "assistant_message": "ok",
                "occurred_at": "2024-05-01T10:00:00Z"}
        batch = [good] + [good | {"turn_index": i} | change for i, change in enumerate(HOSTILE.values())]
        saved = save_pairs("hostile", batch, database=database, embedder=embedder, embed=False)
        results["hostile_records"] = {
            "records": len(batch), "stored": saved.inserted, "rejected": len(saved.rejected),
            "rejections": {list(HOSTILE)[r.record - 1]: f"{r.field}: {r.reason}" for r in saved.rejected}}
        console.print(f"hostile records: stored {saved.inserted}, rejected {len(saved.rejected)}")

        # --- a misbehaving LLM endpoint
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        outage = {}
        for mode, pace, deadline in (("hang", 30.0, args.llm_deadline), ("trickle", 0.5, args.llm_deadline)):
            _Endpoint.mode, _Endpoint.pace = mode, pace
            client = JSONChatClient(model="m", base_url=base_url, api_key="k", attempts_per_model=1,
                                    backoff_s=0.0, timeout_s=deadline)
            started = time.perf_counter()
            try:
                client.ask([{"role": "user", "content": "hi"}], Extraction, "x", {})
                error = None
            except LLMCallError as exc:
                error = type(exc).__name__
            outage[f"one_call_{mode}"] = {"deadline_s": deadline, "seconds": round(time.perf_counter() - started, 2),
                                          "error": error}
        _Endpoint.mode, _Endpoint.pace = "hang", 30.0
        pending_user = "outage"
        save_pairs(pending_user, [good | {"turn_index": i, "user_message": f"outage pair {i}"} for i in range(40)],
                   database=database, embedder=embedder)
        client = JSONChatClient(model="m", base_url=base_url, api_key="k", attempts_per_model=3, backoff_s=1.0,
                                timeout_s=args.llm_deadline)
        started = time.perf_counter()
        stats = extracting.extract_pending(database, OpenAIExtractor(client, max_in_flight=5), pending_user, "default")
        outage["extraction_stage_hanging_endpoint"] = {
            "pending_pairs": 40, "deadline_s": args.llm_deadline, "attempts_per_model": 3, "in_flight": 5,
            "seconds": round(time.perf_counter() - started, 1), "failures": stats.failures,
            "not_attempted": stats.not_attempted, "stopped_early": stats.provider_unavailable}
        server.shutdown()
        results["llm_outage"] = outage
        console.print(f"llm outage: {outage}")

        # --- one statement for many users
        started = time.perf_counter()
        with database.connect() as conn:
            conn.execute(bench_sql("bulk_pairs_for_users"), {"users": args.bulk_users})
            indexed = conn.execute("SELECT count(*) AS n FROM lexical_corpora WHERE user_id LIKE 'bulk-%%'").fetchone()["n"]
        results["bulk_insert"] = {"users": args.bulk_users, "pairs": 2 * args.bulk_users,
                                  "seconds": round(time.perf_counter() - started, 1), "users_indexed": indexed}
        console.print(f"bulk insert: {results['bulk_insert']}")

        # --- the stored counts (migration 0024) after all of the above: kills, concurrent syncs and savers,
        # terminated saves, the bulk insert
        drift = graph_reports.memory_count_drift(database)
        with database.connect() as conn:
            graphs = conn.execute("SELECT count(*) AS n FROM memory_counts").fetchone()["n"]
        results["stored_counts"] = {"graphs": graphs, "drifted": len(drift), "examples": drift[:5]}
        console.print(f"stored counts: {results['stored_counts']}")

    results = {"benchmark": "reliability", "command": "make bench-reliability  (.venv/bin/python bench/reliability.py)",
               "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine(),
               **results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    table = Table(title="reliability under fire")
    table.add_column("scenario")
    table.add_column("result")
    k = results["kill_9_mid_sync"]
    table.add_row(f"kill -9 mid-sync ({k['kills']} kills, {k['users']} users)",
                  f"lost {k['lost_pairs']}, duplicate subjects {k['duplicate_subjects']}, orphans {k['orphan_pairs']}, "
                  f"graphs equal {k['graphs_equal_to_uninterrupted']}/{k['kills']}")
    c = results["concurrent_syncs"]
    table.add_row("4 concurrent syncs", f"duplicates {c['duplicate_subjects']}, equal {c['graph_equals_uninterrupted']}")
    s = results["concurrent_savers"]
    table.add_row("16 concurrent savers", f"{s['distinct']:,} of {s['pairs']:,} stored, {s['rows']:,} rows")
    t = results["terminated_saves"]
    table.add_row("connection terminated mid-save", f"{t['all_or_nothing']}/{t['saves']} all-or-nothing")
    r = results["cross_tenant_recalls"]
    table.add_row(f"{r['recalls']} cross-tenant recalls", f"{r['leaks']} leaks")
    h = results["hostile_records"]
    table.add_row("hostile records", f"{h['rejected']} rejected by field, {h['stored']} stored")
    for name, value in results["llm_outage"].items():
        table.add_row(name.replace("_", " "), f"{value['seconds']} s (deadline {value['deadline_s']} s)")
    b = results["bulk_insert"]
    table.add_row(f"one INSERT for {b['users']:,} users", f"{b['seconds']} s, {b['users_indexed']:,} users indexed")
    c = results["stored_counts"]
    table.add_row("stored counts after all of the above", f"{c['drifted']} of {c['graphs']:,} graphs drifted")
    console.print(table)
    console.print(f"written {args.out}")


if __name__ == "__main__":
    main()
