"""What every benchmark shares. Importing it first puts the project on the import path (benchmarks run as
`python bench/<name>.py` from a checkout, without installing anything more)."""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from dreaming_dagster.ingest.readers import default_dataset_path  # noqa: E402  (needs the path above)
from dreaming_dagster.sql import read_statement  # noqa: E402

# The LongMemEval oracle file (DREAMING_LONGMEMEVAL_PATH, else ../shared/data/longmemeval/).
ORACLE = default_dataset_path()


def bench_sql(name: str) -> str:
    """The benchmarks' own SQL (``bench/sql/<name>.sql``): setup and probes the package never runs."""
    return read_statement(Path(__file__).resolve().parent / "sql", name)


def bench_parser(docstring: str, result: str) -> argparse.ArgumentParser:
    """A bench's arguments: described by its docstring's first line, ``--out`` bench/results/<result>.json."""
    parser = argparse.ArgumentParser(description=docstring.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / f"{result}.json")
    return parser


def oracle_records(limit: int | None = None, dataset: Path = ORACLE) -> list[dict]:
    """A LongMemEval file's pairs (the oracle's by default) in file order as save_pairs records: the first
    ``limit``, or all."""
    from dreaming_dagster.ingest.readers import (
        LineRecord,
        iter_longmemeval_questions,
        longmemeval_session_records,
    )

    pairs = (item.raw for item in longmemeval_session_records(iter_longmemeval_questions(dataset))
             if isinstance(item, LineRecord))
    return list(itertools.islice(pairs, limit))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def speed_probe(rounds: int = 5) -> dict:
    """How fast this machine runs right now, by two fixed workloads (medians of ``rounds``): a pure-Python loop
    of 1,000,000 additions (what spaCy's and the pipeline's Python parts feel) and a float32 matrix product of
    MiniLM's size (384 × 1,536 by 1,536 × 256, what the model's layers feel), in milliseconds. This machine's
    speed changes from hour to hour by up to ~2x; a result carries the probe taken when it was written, so
    figures from different hours can be told apart from changes in the code."""
    import statistics
    import time

    import numpy as np

    def loop() -> None:
        total = 0
        for i in range(1_000_000):
            total += i

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((384, 1536), dtype=np.float32), rng.standard_normal((1536, 256), dtype=np.float32)

    def timed(work) -> float:
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return round(1000 * statistics.median(times), 2)

    return {"python_loop_ms": timed(loop), "matmul_ms": timed(lambda: a @ b)}


# Taken when a bench starts (this module is imported first); machine() adds one when its result is written.
# The machine's speed moves within minutes (the loop measured 66 and 39 ms a minute apart), so a result
# carries both ends of its run.
SPEED_AT_START = speed_probe()


def machine() -> dict:
    """What a result was measured on, and how fast the machine ran when the bench started and when its result
    was written (:func:`speed_probe`)."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "speed_probe": {"at_start": SPEED_AT_START, "at_end": speed_probe()}}


@contextmanager
def counted_statements() -> Iterator[Counter]:
    """Count what this process sends to Postgres while inside: ``statements`` (every query a cursor
    executes) and ``transactions`` (each adds a BEGIN and a COMMIT, or a SAVEPOINT and its RELEASE)."""
    import psycopg

    counts: Counter = Counter()
    execute, executemany, transaction = psycopg.Cursor.execute, psycopg.Cursor.executemany, psycopg.Connection.transaction

    def counted_execute(self, *args, **kwargs):
        counts["statements"] += 1
        return execute(self, *args, **kwargs)

    def counted_executemany(self, query, params_seq, *args, **kwargs):
        params_seq = list(params_seq)
        counts["statements"] += len(params_seq)
        return executemany(self, query, params_seq, *args, **kwargs)

    def counted_transaction(self, *args, **kwargs):
        counts["transactions"] += 1
        return transaction(self, *args, **kwargs)

    psycopg.Cursor.execute, psycopg.Cursor.executemany = counted_execute, counted_executemany
    psycopg.Connection.transaction = counted_transaction
    try:
        yield counts
    finally:
        psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany
        psycopg.Connection.transaction = transaction


# The ``postgres`` database of a running embedded server to bench on instead of starting one in the bench's
# temporary directory (the test suite's smoke runs share its server so).
BENCH_SERVER_VARIABLE = "BENCH_EMBEDDED_ADMIN_URL"


def embedded_admin_url(pgdata: Path) -> str:
    """The ``postgres`` database's URL on a bench's embedded server in ``pgdata``, started as the product starts
    it: with the settings' shared_buffers (DREAMING_EMBEDDED_SHARED_BUFFERS, default auto); or the server
    BENCH_EMBEDDED_ADMIN_URL names."""
    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.storage import embedded

    if os.environ.get(BENCH_SERVER_VARIABLE):
        return os.environ[BENCH_SERVER_VARIABLE]
    return embedded.embedded_url(pgdata, "postgres", shared_buffers=DreamingSettings().embedded_shared_buffers)


@contextmanager
def stopped_on_exit(pgdata: Path) -> Iterator[None]:
    """Stop the embedded server in ``pgdata`` (if one runs) on leaving: a bench's temporary directory must
    not be deleted under a running server (it still writes there, and the cleanup fails on a non-empty
    directory), and a bench run inside a longer process (the smoke tests) must not leave servers behind."""
    import subprocess

    from dreaming_dagster.storage import embedded

    try:
        yield
    finally:
        try:
            embedded.stop(pgdata)
        except subprocess.CalledProcessError as error:  # a server that died already; keep the bench's own error
            print(f"could not stop the server in {pgdata}: {error}", file=sys.stderr)
