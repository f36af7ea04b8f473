"""The embedded default: PostgreSQL 16 + pgvector shipped by the ``pgserver`` package.

The server runs from a data directory, listens only on a Unix socket inside it, and is started once per
process and reused. pgserver keeps a list of the processes holding a handle: the last one to exit stops
the server, so a Dagster run subprocess never stops the server the UI process is still using.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from functools import cache
from pathlib import Path

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

APP_DATABASE = "dreaming"
HANDLE_LIST = ".handle_pids.json"  # pgserver's list of the processes using the server
DAGSTER_DATABASE = "dagster"


@cache
def _server(pgdata: Path):
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR platformdirs warns and uses /tmp/runtime-<uid>, which suits pgserver's lock.
        warnings.simplefilter("ignore")
        import pgserver  # lazily: it pulls psutil/platformdirs and is unused with an external DSN

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with pgserver.PostgresServer._lock:
        _forget_dead_handles(pgdata)
    logger.info("starting embedded Postgres in %s", pgdata)
    return pgserver.get_server(pgdata, cleanup_mode="stop")


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
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        logger.info("forgetting %d dead embedded-Postgres handle(s)", len(pids) - len(alive))
        handles.write_text(json.dumps(alive))


def _ensure_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return
        # Another process may create it between our check and our CREATE.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@cache
def embedded_url(pgdata: Path, database: str = APP_DATABASE) -> str:
    """Start (or attach to) the embedded server in ``pgdata`` and return a psycopg URL for ``database``."""
    server = _server(pgdata.resolve())
    _ensure_database(server.get_uri(), database)
    return server.get_uri(database)


def scratch_database_url(admin_url: str, prefix: str = "scratch") -> str:
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


def dagster_storage_url(pgdata: Path) -> str:
    """SQLAlchemy URL for Dagster's own storage in the ``dagster`` database of the embedded server.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` URL to psycopg 3, whose NOTIFY handling breaks
    dagster-postgres; naming psycopg2 explicitly avoids it.
    """
    url = embedded_url(pgdata, DAGSTER_DATABASE)
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
