"""The embedded default: PostgreSQL 16 + pgvector shipped by the ``pgserver`` package.

The server runs from a data directory, listens only on a Unix socket inside it, and is started once per
process and reused. pgserver keeps a list of the processes holding a handle: the last one to exit stops
the server, so a Dagster run subprocess never stops the server the UI process is still using.

The process that starts the server first writes its settings (``shared_buffers``) to ``dreaming.conf`` in
the data directory, which ``postgresql.conf`` includes: a server another process already runs keeps the
settings it started with. ``ALTER SYSTEM`` still wins (``postgresql.auto.conf`` is read last).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

APP_DATABASE = "dreaming"
HANDLE_LIST = ".handle_pids.json"  # pgserver's list of the processes using the server
DAGSTER_DATABASE = "dagster"
SERVER_SETTINGS_FILE = "dreaming.conf"
_INCLUDE_SERVER_SETTINGS = f"include_if_exists = '{SERVER_SETTINGS_FILE}'"
AUTO_SHARED_BUFFERS_MB = (128, 8192)  # the bounds of shared_buffers = auto


def machine_memory_bytes() -> int:
    """Physical memory, or the container's memory limit when that is lower (cgroup v2, then v1)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            memory = min(memory, int(Path(limit_file).read_text().strip()))  # "max" (no limit) is a ValueError
    return memory


def resolved_shared_buffers(setting: str) -> str:
    """The shared_buffers value a start writes: ``auto`` is a quarter of the machine's memory (a dedicated
    server's usual starting point; pages are only taken as data is read), within AUTO_SHARED_BUFFERS_MB."""
    if setting != "auto":
        return setting
    low, high = AUTO_SHARED_BUFFERS_MB
    return f"{min(high, max(low, machine_memory_bytes() // 4 // 2**20))}MB"


def write_server_settings(pgdata: Path, shared_buffers: str) -> None:
    """Write the settings a server started from ``pgdata`` reads, and include them from postgresql.conf."""
    conf = pgdata / "postgresql.conf"
    if _INCLUDE_SERVER_SETTINGS not in conf.read_text():
        with conf.open("a") as out:
            out.write(f"\n# dreaming-dagster's settings, written by the process that starts the server\n"
                      f"{_INCLUDE_SERVER_SETTINGS}\n")
    (pgdata / SERVER_SETTINGS_FILE).write_text(
        "# Written by dreaming-dagster when it starts this server (DREAMING_EMBEDDED_SHARED_BUFFERS); a server\n"
        "# already running keeps the values it started with.\n"
        f"shared_buffers = '{resolved_shared_buffers(shared_buffers)}'\n")


@cache
def _server_class():
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR platformdirs warns and uses /tmp/runtime-<uid>, which suits pgserver's lock.
        warnings.simplefilter("ignore")
        import pgserver  # lazily: it pulls psutil/platformdirs and is unused with an external DSN
    from pgserver.utils import PostmasterInfo

    class ConfiguredServer(pgserver.PostgresServer):
        """pgserver's server, with dreaming's settings written between initdb and the start: pgserver calls
        ensure_postgres_running after ensure_pgdata_inited, under its inter-process lock, so no other process
        starts the server in between."""

        def __init__(self, pgdata: Path, *, shared_buffers: str):
            self.shared_buffers = shared_buffers
            super().__init__(pgdata, cleanup_mode="stop")

        def ensure_postgres_running(self) -> None:
            running = PostmasterInfo.read_from_pgdata(self.pgdata)
            if running is None or not running.is_running():
                write_server_settings(self.pgdata, self.shared_buffers)
            super().ensure_postgres_running()

    return pgserver, ConfiguredServer


@cache
def _server(pgdata: Path, shared_buffers: str):
    pgserver, configured_server = _server_class()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    pgdata.mkdir(exist_ok=True)
    with pgserver.PostgresServer._lock:
        _forget_dead_handles(pgdata)
        # One handle a data directory and process (pgserver's get_server keeps the same table).
        started = pgserver.PostgresServer._instances.get(pgdata)
    if started is not None:
        return started
    logger.info("starting embedded Postgres in %s", pgdata)
    server = configured_server(pgdata, shared_buffers=shared_buffers)
    # Registered after pgserver's own exit handler, so it runs first (atexit is last-in, first-out): the
    # processes this one outlived (run workers killed with their UI) leave the list, and the last process
    # alive stops the server.
    atexit.register(_forget_dead_handles_locked, pgdata)
    return server


def release_handles() -> None:
    """What this process's exit hooks would do for the embedded servers it holds: let go of each (the last
    process alive stops it). For processes that end without exit hooks: forked run workers end with os._exit."""
    if "pgserver" not in sys.modules:
        return
    pgserver, _ = _server_class()
    for pgdata, server in list(pgserver.PostgresServer._instances.items()):
        _forget_dead_handles_locked(pgdata)
        server.cleanup()  # pgserver's exit hook: stops the server only when this was its last handle


def _forget_dead_handles_locked(pgdata: Path) -> None:
    pgserver, _ = _server_class()
    with pgserver.PostgresServer._lock:
        _forget_dead_handles(pgdata)


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop pids of processes that died without detaching (SIGKILL, or SIGTERM without atexit).

    pgserver stops the server when the last process in its handle list exits; one dead pid left in the
    list would keep the server running forever.
    """
    import psutil

    handles = pgdata / HANDLE_LIST
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        pids = []
    alive = [pid for pid in pids if _alive(psutil, pid)]
    if alive != pids:
        logger.info("forgetting %d dead embedded-Postgres handle(s)", len(pids) - len(alive))
        handles.write_text(json.dumps(alive))


def _alive(psutil, pid: int) -> bool:
    """A process that exists and has not exited (a zombie waits for its parent, but holds nothing)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ensure_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return
        # Another process may create it between our check and our CREATE.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@cache
def embedded_url(pgdata: Path, database: str = APP_DATABASE, *, shared_buffers: str = "auto") -> str:
    """Start (or attach to) the embedded server in ``pgdata`` and return a psycopg URL for ``database``.
    ``shared_buffers`` applies if this call starts the server (see the module's docstring)."""
    server = _server(pgdata.resolve(), shared_buffers)
    _ensure_database(server.get_uri(), database)
    return server.get_uri(database)


def fresh_database_url(admin_url: str, prefix: str = "fresh") -> str:
    """Create a new, empty, uniquely named database on the server of ``admin_url`` (a pgserver URL such
    as ``postgresql://postgres:@/postgres?host=…``) and return its URL. For tests and benchmarks."""
    import uuid

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    _ensure_database(admin_url, name)
    return admin_url.replace("/postgres?", f"/{name}?", 1)


def copy_database_url(admin_url: str, source_url: str, prefix: str = "copy") -> str:
    """A new database on the same server holding a copy of ``source_url``'s (no session may be connected to
    the source meanwhile); returns its URL. For benchmarks that dream one embedded memory several ways."""
    import uuid

    source = psycopg.conninfo.conninfo_to_dict(source_url)["dbname"]
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(source)))
    return admin_url.replace("/postgres?", f"/{name}?", 1)


def dagster_storage_url(pgdata: Path, *, shared_buffers: str = "auto") -> str:
    """SQLAlchemy URL for Dagster's own storage in the ``dagster`` database of the embedded server.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` URL to psycopg 3, whose NOTIFY handling breaks
    dagster-postgres; naming psycopg2 explicitly avoids it.
    """
    url = embedded_url(pgdata, DAGSTER_DATABASE, shared_buffers=shared_buffers)
    return url.replace("postgresql://", "postgresql+psycopg2://", 1)


def stop(pgdata: Path) -> bool:
    """Stop a server running in ``pgdata`` (also one left behind by a killed process). True if one ran."""
    from pgserver import pg_ctl

    pgdata = pgdata.resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True


def data_dump(url: str) -> str:
    """Every row of the database at ``url`` as text (a data-only ``pg_dump``, by the pg_dump shipped with the
    embedded server: its version matches the server's): what forgetting is checked against."""
    from pgserver._commands import POSTGRES_BIN_PATH

    return subprocess.run([str(POSTGRES_BIN_PATH / "pg_dump"), "--data-only", "--no-owner", url],
                          capture_output=True, text=True, check=True).stdout
