"""Dagster's own storage (runs, events, schedules) in Postgres, each process keeping its connections.

dagster-postgres opens a new connection for every statement outside its webserver: a dreaming run of one
user opens ~200 (each event stored, each status change), and each is a new Postgres backend to start and
tear down. :class:`PooledPostgresStorage` is the same storage with each of its three parts keeping one
connection (up to ``max_overflow`` more while threads use it at once), as dagster-postgres already does in
its webserver (``optimize_for_webserver``), without that webserver's statement timeout. dagster.yaml names
it under ``storage: custom``; its config is dagster-postgres' (``postgres_url`` naming psycopg2).

Processes never share a connection: Dagster starts run workers and step processes with spawn or a fork
server, neither of which inherits an open connection. A kept connection is checked before each use (SQLAlchemy's
pre-ping): after a Postgres restart its first statement would fail, and in a run worker that statement is an
event write, which would fail the run.
"""

from __future__ import annotations

from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

# A pooled connection older than this is replaced on its next use (a server restarted meanwhile, say).
POOL_RECYCLE_S = 3600
# Connections beyond the kept one while several threads (the daemon's) use a storage at once.
MAX_OVERFLOW = 20
NO_STATEMENT_TIMEOUT = 0  # Postgres' statement_timeout = 0: none (runs store events; sensors read long lists)


class PooledPostgresStorage(DagsterPostgresStorage):
    """dagster-postgres' storage keeping a connection per part and process (see the module's docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for part in (self.run_storage, self.event_log_storage, self.schedule_storage):
            part.optimize_for_webserver(statement_timeout=NO_STATEMENT_TIMEOUT, pool_recycle=POOL_RECYCLE_S,
                                        max_overflow=MAX_OVERFLOW)
            # create_engine(pool_pre_ping=True) sets the same flag; dagster-postgres builds the engine itself.
            part._engine.pool._pre_ping = True  # noqa: SLF001 - tests/test_instance_storage.py pins it

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> PooledPostgresStorage:
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))
