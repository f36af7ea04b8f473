"""The memory service under load: `dreaming serve` over HTTP against the same calls in-process, side by side.

    .venv/bin/python bench/serve.py [--users 10000,100000] [--clients 1,8,32,64] [--seconds 15]

Two users are bulk-loaded as bench/recall.py loads them (synthetic clustered 384-d vectors, texts drawn from
the LongMemEval oracle, subjects and links): one with 10,000 pairs and one with 100,000, in one embedded
Postgres, their ranker profiles cached as dreaming leaves them. A random v3 ranker file is published, so every recall runs the model. Then, for each user and
each number of concurrent clients, for a fixed time (and at most --max-requests requests):

- http: `dreaming serve`, started by this bench on 127.0.0.1 (a port it picks), driven by that many
  asyncio clients (httpx) each sending one request at a time: 90% POST /v1/recall (an oracle question,
  k 10), 10% POST /v1/pairs (one new oracle pair, embedded inline);
- in-process: the same mix from that many threads calling Recaller.recall and save_pairs directly, with
  the service's pools and settings;
- and torch's thread count under that load: the in-process mix with 8 clients at 1 thread (the service's
  DREAMING_SERVE_TORCH_THREADS) and at 2, alternated twice.

Where the CPU goes (`cpu_profile`): the 8-client HTTP mix on the larger user for --profile-seconds, with the
CPU seconds of the service's processes, of Postgres' and of the load generator counted, and py-spy sampling
the service (bench/cpu_profile.py sorts its samples by what spends them and by the request's stage). And what
recall answers (`answers`): the ids, in order, of the top 10 for the first --answer-questions questions on
each user, on the memory as loaded (before any request saves to it) and as of its end (ANSWERS_AS_OF), so a
change to how recall runs can show it answers the same. Compare answers read on one database: pgvector builds
an HNSW index with random levels, so two runs' indexes differ and about one id in ten with them.

Reported per cell: requests/s, p50/p95/p99 latency of recalls and of saves, errors, and the p50 of each stage
recall reports in its timings (the question's time grammar, embedding, profile, model, and `query`: the BM25
pool and the ranking statement). `one_client_recall_to_statement` sets each 1-client cell's recall p50 against
its own requests' `query` p50, side by side. The profile adds what the cores carry at the measured CPU a
request: every side's, and Postgres' alone. Client and server share
the machine's 2 cores, so the HTTP figures include the load generator's own cost. The server is stopped
(SIGTERM) when the bench ends or fails. Results: bench/results/serve.{json,md}.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import cpu_profile
import httpx
import numpy as np
import psycopg
import torch
from common import (  # first
    ORACLE,
    bench_parser,
    bench_sql,
    embedded_admin_url,
    machine,
    percentile,
    stopped_on_exit,
)
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from recall import oracle_texts
from synthetic import DIMENSION, load_user
from tqdm import tqdm

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import embedder_from_settings
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.retrieval.ranker import CompositeRanker, save_ranker
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.service import api_keys
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database

RECALL_SHARE = 0.9
HOST = "127.0.0.1"  # the bench only ever loads the server it starts, on the loopback address


class Mix:
    """The request mix: recalls of oracle questions, saves of new pairs (unique, so each is inserted)."""

    def __init__(self, questions: list[str], pairs: list[tuple[str, str]], seed: int):
        self.questions, self.pairs, self.random, self.saved = questions, pairs, random.Random(seed), 0

    def next(self) -> tuple[str, dict]:
        if self.random.random() < RECALL_SHARE:
            return "recall", {"query": self.random.choice(self.questions), "k": 10}
        self.saved += 1
        user_message, reply = self.random.choice(self.pairs)
        return "save", {"pairs": [{"session_id": f"bench-{self.saved // 10}", "user_message": user_message,
                                   "assistant_message": reply, "turn_index": self.saved,
                                   "occurred_at": datetime.now(UTC).isoformat()}]}


def cell_summary(latencies: dict[str, list[float]], errors: int, seconds: float,
                 stages: dict[str, list[float]] | None = None) -> dict:
    """Requests/s, errors and latency percentiles of a cell; with ``stages`` (each recall's ``timings_ms``,
    as recall reports them) the p50 of each stage, ``query`` being the ranking statement as recall runs it
    (the BM25 pool and the statement)."""
    done = sum(len(v) for v in latencies.values())
    out = {"requests": done, "errors": errors, "seconds": round(seconds, 2),
           "requests_per_s": round(done / seconds, 1) if seconds else 0.0}
    for kind, values in latencies.items():
        if values:
            out[kind] = {"n": len(values), "p50_ms": round(percentile(values, 0.5), 1),
                         "p95_ms": round(percentile(values, 0.95), 1), "p99_ms": round(percentile(values, 0.99), 1)}
    if stages:
        out["recall_stages_p50_ms"] = {stage: round(percentile(values, 0.5), 1) for stage, values in stages.items()}
    return out


def add_stages(stages: dict[str, list[float]], timings_ms: dict[str, float]) -> None:
    for stage, ms in timings_ms.items():
        stages.setdefault(stage, []).append(ms)


async def drive_http(url: str, key: str, user: str, mix: Mix, clients: int, seconds: float, max_requests: int) -> dict:
    latencies: dict[str, list[float]] = {"recall": [], "save": []}
    stages: dict[str, list[float]] = {}
    errors = 0
    sent = 0
    deadline = time.perf_counter() + seconds
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors, sent
        while time.perf_counter() < deadline and sent < max_requests:
            sent += 1
            kind, body = mix.next()
            path = "/v1/recall" if kind == "recall" else "/v1/pairs"
            started = time.perf_counter()
            try:
                response = await http.post(path, json={"user_id": user, **body}, headers=headers)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies[kind].append((time.perf_counter() - started) * 1000)
                if kind == "recall":
                    add_stages(stages, response.json()["timings_ms"])
            else:
                errors += 1

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return cell_summary(latencies, errors, time.perf_counter() - started, stages)


def drive_in_process(recaller: Recaller, database: Database, embedder, user: str, mix: Mix, clients: int,
                     seconds: float, max_requests: int) -> dict:
    latencies: dict[str, list[float]] = {"recall": [], "save": []}
    stages: dict[str, list[float]] = {}
    errors = [0]
    sent = [0]
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline and sent[0] < max_requests:
            sent[0] += 1
            kind, body = mix.next()
            started = time.perf_counter()
            try:
                if kind == "recall":
                    timings_ms = recaller.recall(user, body["query"], body["k"]).timings_ms
                else:
                    save_pairs(user, body["pairs"], database=database, embedder=embedder)
                latencies[kind].append((time.perf_counter() - started) * 1000)
                if kind == "recall":
                    add_stages(stages, timings_ms)
            except Exception:  # noqa: BLE001 - counted, as the HTTP side counts a non-200
                errors[0] += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        for future in [pool.submit(worker) for _ in range(clients)]:
            future.result()
    return cell_summary(latencies, errors[0], time.perf_counter() - started, stages)


def start_server(env: dict, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "dreaming_dagster.cli", "serve", "--host", HOST, "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("dreaming serve exited while starting")
        try:
            if httpx.get(f"http://{HOST}:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("dreaming serve did not come up")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def main() -> None:
    parser = bench_parser(__doc__, "serve")
    parser.add_argument("--users", default="10000,100000", help="pairs of each benchmark user")
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each cell runs")
    parser.add_argument("--max-requests", type=int, default=5000, help="at most this many requests a cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-seconds", type=float, default=20.0, help="the 8-client profile's length (0: none)")
    parser.add_argument("--answer-questions", type=int, default=50, help="questions whose top 10 is recorded")
    args = parser.parse_args()
    sizes = [int(n) for n in args.users.split(",")]
    levels = [int(n) for n in args.clients.split(",")]
    rng = np.random.default_rng(args.seed)
    pair_texts, questions = oracle_texts(ORACLE)
    results: dict = {"command": "bench/serve.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"),
                     "machine": machine() | {"torch": torch.__version__}, "mix": f"{RECALL_SHARE:.0%} recall, "
                     f"{1 - RECALL_SHARE:.0%} save of one pair", "seconds_per_cell": args.seconds, "cells": {}}
    with tempfile.TemporaryDirectory(prefix="dd-serve-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin = embedded_admin_url(Path(tmp) / "pgdata")
        url = embedded.fresh_database_url(admin, "serve")
        settings = DreamingSettings(database_url=url, data_dir=Path(tmp))
        embedder = embedder_from_settings(settings)  # the service's: the shipped memory encoder by default
        Database(url).ensure_schema(embedder.spec)
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            register_vector(conn)
            conn.execute(bench_sql("drop_vector_indexes"))
            with tqdm(total=sum(sizes), desc="loading pairs", unit="pair") as progress:
                for n in sizes:
                    load_user(conn, rng, f"u{n}", n, max(n // 5, 60), max(n // 250, 10), 3 * 365, progress,
                              texts=pair_texts)
            conn.execute(bench_sql("build_settings"))
            print("building the HNSW indexes …", flush=True)
            conn.execute(bench_sql("create_vector_indexes"))
            conn.execute("VACUUM ANALYZE")
        for n in sizes:  # as dreaming leaves a user: the ranker's profile cached, not computed per recall
            refresh_profile(Database(url), f"u{n}", "default")
        torch.manual_seed(args.seed)
        save_ranker(CompositeRanker(DIMENSION, 8), settings.resolved_ranker_path,
                    embedding_model=embedder.spec.model)
        secret, _ = api_keys.create_key(Database(url), embedder.spec, "default", "bench")

        # What recall answers on the memory as loaded, before any request saves to it.
        first_recaller = Recaller.from_settings(Database(url), embedder, settings)
        results["answers"] = {f"u{n}": top_ids(first_recaller, f"u{n}", questions[:args.answer_questions]) for n in sizes}
        first_recaller.close()

        env = {**{k: v for k, v in os.environ.items() if not k.startswith("DREAMING_")},
               "DREAMING_DATABASE_URL": url, "DREAMING_DATA_DIR": tmp,
               "DREAMING_SERVE_RATE_PER_SECOND": "100000", "DREAMING_SERVE_RATE_BURST": "100000",
               "DREAMING_SERVE_CONNECTIONS": "16", "DREAMING_RECALL_CONNECTIONS": "16"}
        port = free_port()
        server = start_server(env, port)
        try:
            for n in sizes:
                user = f"u{n}"
                for clients in levels:
                    cell = asyncio.run(drive_http(f"http://{HOST}:{port}", secret, user,
                                                  Mix(questions, pair_texts, args.seed + clients), clients,
                                                  args.seconds, args.max_requests))
                    results["cells"][f"{user} · http · {clients}"] = cell
                    print(user, "http", clients, cell, flush=True)
            if args.profile_seconds:
                results["cpu_profile"] = profiled_load(server.pid, url, Path(tmp), f"http://{HOST}:{port}", secret,
                                                       f"u{max(sizes)}", Mix(questions, pair_texts, args.seed),
                                                       args.profile_seconds)
                print("cpu profile", json.dumps(results["cpu_profile"], indent=1), flush=True)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)

        # The same mix in-process, after the server has stopped (one workload on the machine at a time).
        torch.set_num_threads(DreamingSettings().serve_torch_threads)
        service_settings = DreamingSettings(database_url=url, data_dir=Path(tmp), recall_connections=16)
        database = Database(url, pool_size=16)
        recaller = Recaller.from_settings(database, embedder, service_settings)
        recaller.recall(f"u{sizes[0]}", "warm up", 10)
        for n in sizes:
            user = f"u{n}"
            for clients in levels:
                cell = drive_in_process(recaller, database, embedder, user, Mix(questions, pair_texts, args.seed + clients),
                                        clients, args.seconds, args.max_requests)
                results["cells"][f"{user} · in-process · {clients}"] = cell
                print(user, "in-process", clients, cell, flush=True)
        # Torch's threads under concurrent requests: the service's setting (1) against two (the cores), the
        # 8-client mix on the smaller user, side by side.
        results["torch_threads_8_clients"] = {}
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            cell = drive_in_process(recaller, database, embedder, f"u{sizes[0]}", Mix(questions, pair_texts, threads),
                                    8, args.seconds, args.max_requests)
            results["torch_threads_8_clients"].setdefault(str(threads), []).append(cell)
            print("torch threads", threads, cell, flush=True)
        recaller.close()
        database.close()
    results["one_client_recall_to_statement"] = one_client_ratios(results["cells"])
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))


# What recall answers is read as of the day after the loaded pairs' last (synthetic.START + 3 years): the
# same answer at any hour, whatever the mix has saved since.
ANSWERS_AS_OF = "2026-01-02T00:00:00+00:00"


def top_ids(recaller: Recaller, user: str, questions: list[str]) -> list[list[str]]:
    """The ids of each question's top 10, in order, as of ANSWERS_AS_OF."""
    return [[m.pair_id for m in recaller.recall(user, question, 10, as_of=ANSWERS_AS_OF)] for question in questions]


def profiled_load(service_pid: int, database_url: str, tmp: Path, url: str, key: str, user: str, mix: Mix,
                  seconds: float) -> dict:
    """The 8-client HTTP mix for ``seconds`` with the CPU of every side counted and the service sampled."""
    meter = cpu_profile.CpuMeter(service_pid, database_url)
    raw = tmp / "py-spy.txt"
    sampler = cpu_profile.start_sampling(service_pid, seconds + 2, raw)
    time.sleep(1.0)  # py-spy attached before the load starts
    meter.start()
    cell = asyncio.run(drive_http(url, key, user, mix, 8, seconds, 10**9))
    cpu = meter.stop()
    _, errors = sampler.communicate(timeout=120)
    if sampler.returncode != 0 or not raw.is_file():
        raise RuntimeError(f"py-spy failed: {errors.decode(errors='replace')[-500:]}")
    requests = cell["requests"]
    per_request = {side: 1000 * s / requests for side, s in cpu.items()}
    cores_ms = 1000 * (os.cpu_count() or 1)
    # What the cores could carry at these costs: all of a request's CPU, and Postgres' part alone (the
    # bound were the service to cost nothing).
    bound = {"every side": round(cores_ms / sum(per_request.values()), 1),
             "postgres alone": round(cores_ms / per_request["postgres"], 1)}
    return {"clients": 8, "user": user, "cell": cell, "cpu_seconds": cpu,
            "cpu_ms_per_request": {side: round(ms, 1) for side, ms in per_request.items()},
            "requests_per_s_the_cores_carry": bound,
            "service_samples": cpu_profile.breakdown(cpu_profile.read_samples(raw))}


def recall_to_statement(cell: dict) -> dict | None:
    """A cell's recall p50 against the p50 of the ranking statement as recall runs it, read from the same
    requests' timings (recall's ``query`` stage: the BM25 pool and the statement); None without both."""
    statement = cell.get("recall_stages_p50_ms", {}).get("query")
    if not statement or "recall" not in cell:
        return None
    return {"recall_p50_ms": cell["recall"]["p50_ms"], "statement_p50_ms": statement,
            "ratio": round(cell["recall"]["p50_ms"] / statement, 2)}


def one_client_ratios(cells: dict[str, dict]) -> dict[str, dict]:
    """:func:`recall_to_statement` of each 1-client cell."""
    return {name: ratio for name, cell in cells.items()
            if name.endswith(" · 1") and (ratio := recall_to_statement(cell)) is not None}


def markdown(r: dict) -> str:
    lines = ["# The memory service under load", "", f"`{r['command']}` · {r['date']} · {r['mix']} · "
             f"{r['seconds_per_cell']} s a cell", "",
             "| user · path · clients | requests/s | recall p50 / p95 / p99 ms | save p50 / p95 / p99 ms | errors |",
             "|---|---:|---|---|---:|"]
    def cols(cell: dict, kind: str) -> str:
        c = cell.get(kind)
        return f"{c['p50_ms']} / {c['p95_ms']} / {c['p99_ms']}" if c else "–"

    for name, cell in r["cells"].items():
        lines.append(f"| {name} | {cell['requests_per_s']} | {cols(cell, 'recall')} | {cols(cell, 'save')} | "
                     f"{cell['errors']} |")
    stage_names = ["time", "embed", "profile", "model", "query"]
    lines += ["", "Recall's stages, p50 ms as recall reports them (`query`: the BM25 pool and the ranking statement):",
              "", "| user · path · clients | " + " | ".join(stage_names) + " | recall p50 | recall / query |",
              "|---|" + "---:|" * (len(stage_names) + 2)]
    for name, cell in r["cells"].items():
        ratio = recall_to_statement(cell)
        if ratio is not None:
            stages = cell["recall_stages_p50_ms"]
            lines.append(f"| {name} | " + " | ".join(str(stages.get(s, "–")) for s in stage_names)
                         + f" | {ratio['recall_p50_ms']} | {ratio['ratio']:.2f} |")
    lines += ["", "Torch threads of the process, in-process mix with 8 clients on the smaller user (two runs each, "
              "alternating):", "", "| torch threads | requests/s | recall p50 / p95 / p99 ms |", "|---:|---|---|"]
    for threads, cells in r.get("torch_threads_8_clients", {}).items():
        lines.append(f"| {threads} | {', '.join(str(c['requests_per_s']) for c in cells)} | "
                     f"{'; '.join(cols(c, 'recall') for c in cells)} |")
    profile = r.get("cpu_profile")
    if profile:
        per_request = profile["cpu_ms_per_request"]
        lines += ["", f"Where the CPU goes: the 8-client HTTP mix on {profile['user']}, "
                  f"{profile['cell']['requests_per_s']} requests/s; CPU ms a request: "
                  + ", ".join(f"{side} {ms}" for side, ms in per_request.items())
                  + "; the cores carry at these costs: "
                  + ", ".join(f"{how} {rate} requests/s" for how, rate in profile["requests_per_s_the_cores_carry"].items()),
                  "",
                  f"The service's samples that spend CPU ({1 - profile['service_samples']['waiting_share']:.0%} "
                  "of them; the rest wait for the GIL, a lock or a socket):", "",
                  "| by what spends them | share |", "|---|---:|"]
        samples = profile["service_samples"]
        lines += [f"| {kind} | {share:.1%} |" for kind, share in samples["by_what_spends"].items()]
        lines += ["", "| by the stage they are under | share |", "|---|---:|"]
        lines += [f"| {stage} | {share:.1%} |" for stage, share in samples["by_stage"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
