"""Where a service's CPU goes under load: the CPU seconds of the service's processes, of Postgres' and of the
load generator, and py-spy's samples of the service (native frames included, so ONNX Runtime and torch are
seen) sorted into what spends them. bench/serve.py profiles its 8-client HTTP load with it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil

# What spends a sample, read from its innermost frame outward: the first kind whose pattern a frame holds.
WAITING = "waiting: the GIL, a lock, a socket (no CPU)"
LEAF_KINDS = (
    (WAITING, ("take_gil", "PyThread_acquire_lock", "futex", "pthread_cond", "sem_wait", "sem_timedwait",
               "epoll_wait", "poll (", "select (", "nanosleep")),
    ("ONNX Runtime", ("onnxruntime",)),
    ("torch", ("torch/", "libtorch", "libgomp", "at::", "c10::")),
    ("time grammar (dates/)", ("dreaming_dagster/dates/",)),
    ("BM25 postings (lexical_postings.py)", ("lexical_postings.py",)),
    ("psycopg and libpq", ("psycopg", "libpq")),
    ("HTTP: uvicorn, Starlette, FastAPI, pydantic, JSON", ("uvicorn", "starlette", "fastapi", "pydantic", "anyio",
                                                           "httptools", "json/", "asyncio/", "h11")),
    ("dreaming_dagster's own Python", ("dreaming_dagster/",)),
)
# A request's stages, each counted over every sample under it (a sample can be under two: recall embeds).
STAGES = (
    ("recall()", "recall (dreaming_dagster/retrieval/recaller.py"),
    ("recall: time grammar (read_question)", "read_question (dreaming_dagster/dates/"),
    ("embedding (recall's question, a save's turns)", "embed (dreaming_dagster/embeddings.py"),
    ("recall: profile (read_profile)", "read_profile (dreaming_dagster/retrieval/profiles.py"),
    ("recall: question type (classifier)", "predict_question_type (dreaming_dagster/retrieval/recaller.py"),
    ("recall: features and model (predict_weights)", "predict_weights (dreaming_dagster/retrieval/ranker.py"),
    ("recall: BM25 pool (lexical_pool_pairs)", "lexical_pool_pairs (dreaming_dagster/retrieval/recaller.py"),
    ("recall: the ranking statement (composite_rows)", "composite_rows (dreaming_dagster/retrieval/recaller.py"),
    ("recall: result objects (to_memory, as_dict)", "to_memory (dreaming_dagster/retrieval/recaller.py"),
    ("API key lookup (authorized)", "authorized (dreaming_dagster/service/dependencies.py"),
    ("save_pairs (the 10% of saves, embedding inline)", "save_pairs (dreaming_dagster/ingest/save.py"),
)


def cpu_seconds(processes: list[psutil.Process]) -> dict[int, float]:
    """Each live process's user + system CPU seconds, by pid."""
    seconds = {}
    for process in processes:
        try:
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return seconds


def with_children(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def postmaster_pid(database_url: str) -> int:
    """The Postgres server's postmaster: the parent of a backend (an embedded or a local external server)."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        return psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).ppid()


class CpuMeter:
    """CPU seconds spent between start() and stop() by the service (``service_pid`` and its children), Postgres
    (the postmaster of ``database_url`` and its backends) and this process (the load generator). A backend
    that starts in between counts from zero; one that exits in between is not counted (the pools keep theirs)."""

    def __init__(self, service_pid: int, database_url: str):
        self.service_pid, self.postmaster = service_pid, postmaster_pid(database_url)

    def _now(self) -> dict[str, dict[int, float]]:
        return {"service": cpu_seconds(with_children(self.service_pid)),
                "postgres": cpu_seconds(with_children(self.postmaster)),
                "load generator": cpu_seconds([psutil.Process()])}

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> dict[str, float]:
        ended = self._now()
        return {side: round(sum(s - self._started[side].get(pid, 0.0) for pid, s in ended[side].items()), 3)
                for side in ended}


def start_sampling(pid: int, seconds: float, out: Path, rate: int = 100) -> subprocess.Popen:
    """py-spy recording ``pid`` and its subprocesses for ``seconds``, native frames included (each sample
    pauses the process a moment to read them: the profiled load runs a little slower than an unprofiled one)."""
    py_spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--duration", str(round(seconds)),
                             "--rate", str(rate), "--format", "raw", "--output", str(out), "--native",
                             "--subprocesses"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def read_samples(raw: Path) -> Counter:
    """py-spy's raw output: each distinct stack (root first, ``;``-joined frames) and its sample count."""
    stacks: Counter = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def leaf_kind(frames: list[str]) -> str:
    for frame in reversed(frames):
        for kind, patterns in LEAF_KINDS:
            if any(pattern in frame for pattern in patterns):
                return kind
    return "other (interpreter, libc)"


def breakdown(stacks: Counter) -> dict:
    """Of the samples that spend CPU (a thread waiting for the GIL, a lock or a socket does not), the shares
    by what spends them (innermost known frame) and by the stage they are under; and the waiting share."""
    kinds: Counter = Counter()
    stages: Counter = Counter()
    hottest: Counter = Counter()  # the innermost Python function of each busy sample (native code under it)
    waiting = 0
    for stack, count in stacks.items():
        frames = stack.split(";")
        kind = leaf_kind(frames)
        if kind == WAITING:
            waiting += count
            continue
        kinds[kind] += count
        for stage, marker in STAGES:
            if marker in stack:
                stages[stage] += count
        innermost = next((frame for frame in reversed(frames) if ".py:" in frame), None)
        hottest[innermost.split(":")[0] + ")" if innermost else "(native only)"] += count  # without the line
    busy = sum(kinds.values())
    share = (lambda n: round(n / busy, 4)) if busy else (lambda n: 0.0)
    return {"samples": busy + waiting, "cpu_samples": busy,
            "waiting_share": round(waiting / (busy + waiting), 4) if busy + waiting else 0.0,
            "by_what_spends": {kind: share(n) for kind, n in kinds.most_common()},
            "by_stage": {stage: share(stages[stage]) for stage, _ in STAGES},
            "hottest_python_functions": {frame: share(n) for frame, n in hottest.most_common(15)}}
