"""A user's memory under the user's control: inspect it (inspection), take it elsewhere (export) and
forget it (forgetting)."""

from __future__ import annotations

from dreaming_dagster.storage.database import Database


def ready_database(database: Database | None) -> Database:
    """``database``, or the process's default, with its schema ensured."""
    from dreaming_dagster.config.runtime import default_database, default_embedder

    database = database or default_database()
    database.ensure_schema(default_embedder().spec)
    return database
