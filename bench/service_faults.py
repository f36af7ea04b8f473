"""`dreaming serve` under faults and attack, measured from outside: a kill -9 mid-sync and the restart, a SIGTERM
past the grace period, a flood of wrong keys.

    .venv/bin/python bench/service_faults.py [--pairs 600] [--wrong-keys 2000] [--scenarios kill,sigterm,wrong-keys]

A real server process on its own embedded Postgres (a temporary data directory, the local MiniLM embedder):
- kill -9: --pairs pairs saved and synced in one request; the server is killed while it holds the user's
  graph lock with its extraction workers started. Measured: processes of it alive 10 s later, seconds until
  a new server on the same port answers /healthz, whether Postgres kept running (same postmaster), and the
  pairs the next POST /v1/sync leaves pending.
- SIGTERM with DREAMING_SERVE_SHUTDOWN_SECONDS=1 during the same kind of sync: seconds until the process
  is gone, processes of it left.
- --wrong-keys requests with random keys from one address: how many after the failure burst got 429, and
  the database transactions they cost (pg_stat_database, read from another database once every backend
  has reported).
Results: bench/results/service_faults.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import psycopg
from common import (  # first: puts the project on the import path
    ROOT,
    bench_parser,
    bench_sql,
    machine,
    stopped_on_exit,
)
from rich.console import Console
from rich.table import Table

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.storage import embedded

SCENARIOS = ("kill", "sigterm", "wrong-keys")
STATS_FLUSH_SECONDS = 11  # an idle backend reports its transactions within 10 s (PGSTAT_IDLE_INTERVAL)


class Service:
    """`dreaming serve` processes on one port over the embedded default in ``data_dir``."""

    def __init__(self, data_dir: Path, port: int):
        self.data_dir, self.port, self.url = data_dir, port, f"http://127.0.0.1:{port}"
        self.env = {name: value for name, value in os.environ.items() if not name.startswith("DREAMING_")}
        self.env |= {"DREAMING_DATA_DIR": str(data_dir), "DREAMING_SERVE_SHUTDOWN_SECONDS": "1"}

    def cli(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dreaming_dagster.cli", *args], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=True)
        return done.stdout

    def start(self) -> subprocess.Popen:
        log = (self.data_dir / "serve.log").open("a")  # a pipe nobody reads would fill and block the server
        return subprocess.Popen([sys.executable, "-m", "dreaming_dagster.cli", "serve", "--port", str(self.port)],
                                env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def seconds_to_healthy(self, process: subprocess.Popen) -> float:
        started = time.monotonic()
        while time.monotonic() - started < 300:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                time.sleep(0.05)
            if process.poll() is not None:
                raise RuntimeError(f"dreaming serve exited: {(self.data_dir / 'serve.log').read_text()[-2000:]}")
        raise RuntimeError("dreaming serve did not come up")

    def connect(self, database: str) -> psycopg.Connection:
        return psycopg.connect(embedded.embedded_url(self.data_dir / "pgdata", database), autocommit=True)

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])

    def graph_lock_held(self) -> bool:
        with self.connect("dreaming") as conn:
            return conn.execute(bench_sql("graph_lock_held"), {"user_id": "alice", "kg_id": "acme"}).fetchone()[0]


def pairs(count: int, offset: int) -> list[dict]:
    return [{"session_id": f"s{i // 20}", "occurred_at": "2026-05-01T10:00:00Z",
             "user_message": f"I met Priya Sharma in Lisbon about the Tesla order number {offset + i}",
             "assistant_message": f"Noted the Lisbon meeting {offset + i}."} for i in range(count)]


def sync_mid_way(service: Service, process: subprocess.Popen, headers: dict, batch: list[dict]) -> list[int]:
    """Start a save-and-sync of ``batch``; return once the server holds the graph lock with its extraction
    workers started: the server's process and its children."""
    threading.Thread(target=lambda: _post_ignoring_errors(service, headers, batch), daemon=True).start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if service.graph_lock_held() and len(psutil.Process(process.pid).children()) >= 2:
            return [process.pid] + [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
        time.sleep(0.05)
    raise RuntimeError("the sync never held the graph lock with its workers")


def _post_ignoring_errors(service: Service, headers: dict, batch: list[dict]) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the server is killed under it: what the bench does
        httpx.post(f"{service.url}/v1/pairs", headers=headers, json={"user_id": "alice", "sync": True, "pairs": batch},
                   timeout=600)


def alive_after(pids: list[int], seconds: float) -> int:
    processes = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(processes, timeout=seconds)
    return len(alive)


def main() -> None:
    parser = bench_parser(__doc__, "service_faults")
    parser.add_argument("--pairs", type=int, default=600)
    parser.add_argument("--wrong-keys", type=int, default=2000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="which to run, comma-separated (sigterm follows kill's restart, so it needs kill)")
    args = parser.parse_args()
    scenarios = set(args.scenarios.split(","))
    if not scenarios <= set(SCENARIOS) or ("sigterm" in scenarios and "kill" not in scenarios):
        parser.error(f"--scenarios: some of {', '.join(SCENARIOS)} (sigterm with kill)")
    kill = sigterm = wrong_keys = None
    console = Console()
    with tempfile.TemporaryDirectory(prefix="dd-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        with socket.socket() as free:  # a port nothing listens on
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        service = Service(Path(tmp), port)
        headers = {"Authorization": f"Bearer {service.cli('keys', 'create', '--tenant', 'acme').split()[-1]}"}

        if "kill" in scenarios:
            console.print("kill -9 mid-sync, then a restart on the same port")
            first = service.start()
            first_start_s = service.seconds_to_healthy(first)
            postmaster = service.postmaster_pid()
            family = sync_mid_way(service, first, headers, pairs(args.pairs, 0))
            first.kill()
            first.wait()
            survivors = alive_after(family, 10)
            restarted = service.start()
            restart_s = service.seconds_to_healthy(restarted)
            same_postmaster = service.postmaster_pid() == postmaster and psutil.pid_exists(postmaster)
            httpx.post(f"{service.url}/v1/sync", headers=headers, json={"user_id": "alice"}, timeout=600).raise_for_status()
            memory = httpx.get(f"{service.url}/v1/users/alice/stats", headers=headers, timeout=60).json()["memory"]
            kill = {"pairs": args.pairs, "workers_at_kill": len(family) - 1, "processes_alive_10_s_after": survivors,
                    "first_start_to_healthz_s": round(first_start_s, 2), "restart_to_healthz_s": round(restart_s, 2),
                    "postgres_kept_running": same_postmaster, "pairs_stored": memory["pairs"],
                    "pending_after_next_sync": memory["pending_embedding"] + memory["pending_extraction"]}

        if "sigterm" in scenarios:
            console.print("SIGTERM past a 1 s grace period")
            family = sync_mid_way(service, restarted, headers, pairs(args.pairs, args.pairs))
            signalled = time.monotonic()
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=120)
            sigterm = {"grace_s": 1.0, "exit_after_signal_s": round(time.monotonic() - signalled, 2),
                       "processes_alive_10_s_after": alive_after(family, 10)}

        if "wrong-keys" in scenarios:
            console.print(f"{args.wrong_keys:,} wrong keys")
            flooded = service.start()
            service.seconds_to_healthy(flooded)
            burst = DreamingSettings().serve_auth_failure_burst
            with service.connect("dreaming") as dreaming:
                # The syncs above left autovacuum work, whose transactions would land in the flood's window.
                dreaming.execute("VACUUM ANALYZE")
            with service.connect("postgres") as stats:
                def transactions() -> int:
                    time.sleep(STATS_FLUSH_SECONDS)
                    stats.execute("SELECT pg_stat_clear_snapshot()")
                    return stats.execute(bench_sql("database_transactions"), {"database": "dreaming"}).fetchone()[0]

                before = transactions()
                started = time.monotonic()
                with httpx.Client(timeout=30) as client:
                    statuses = [client.post(f"{service.url}/v1/recall", json={"user_id": "u", "query": "q"}, headers={
                        "Authorization": f"Bearer dd_{secrets.token_urlsafe(32)}"}).status_code for _ in range(args.wrong_keys)]
                flood_s = time.monotonic() - started
                spent = transactions() - before
            flooded.send_signal(signal.SIGTERM)
            flooded.wait(timeout=120)
            after_burst = statuses[burst:]
            wrong_keys = {"requests": args.wrong_keys, "seconds": round(flood_s, 2), "burst": burst,
                          "answered_429_after_burst": after_burst.count(429), "after_burst": len(after_burst),
                          "database_transactions": spent,
                          "transactions_per_100": round(100 * spent / args.wrong_keys, 2)}

    results = {"command": "make bench-service-faults  (.venv/bin/python bench/service_faults.py)",
               "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
               "kill_mid_sync": kill, "sigterm_past_grace": sigterm, "wrong_keys": wrong_keys}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    table = Table(title="dreaming serve under faults and attack")
    table.add_column("measure")
    table.add_column("result")
    if kill:
        table.add_row("kill -9 mid-sync: processes of the server alive 10 s later", str(kill["processes_alive_10_s_after"]))
        table.add_row("restart on the same port: /healthz after", f"{kill['restart_to_healthz_s']} s")
        table.add_row("embedded Postgres kept running", str(kill["postgres_kept_running"]))
        table.add_row("pairs pending after the next sync", str(kill["pending_after_next_sync"]))
    if sigterm:
        table.add_row("SIGTERM past a 1 s grace: exit after", f"{sigterm['exit_after_signal_s']} s")
    if wrong_keys:
        table.add_row(f"{args.wrong_keys:,} wrong keys: 429 after the burst",
                      f"{wrong_keys['answered_429_after_burst']:,} of {wrong_keys['after_burst']:,}")
        table.add_row("database transactions they cost", f"{spent} ({wrong_keys['transactions_per_100']} per 100)")
    console.print(table)


if __name__ == "__main__":
    main()
