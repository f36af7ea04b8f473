"""A user's memory under the user's control: inspect it (inspection), take it elsewhere (export) and
forget it (forgetting)."""

from __future__ import annotations

from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.storage.database import Database


def ready_database(database: Database | None, embedder: Embedder | None = None) -> Database:
    """``database``, or the process's default, with its schema ensured. Checked against ``embedder`` when one is
    given (an import embeds); a given database otherwise keeps the model it records (a service built with
    another embedder than the environment's reads and forgets its own memory); the default database is
    checked against the default embedder."""
    from dreaming_dagster.process_defaults import default_database, default_embedder

    if embedder is not None:
        database = database or default_database()
        database.ensure_schema(embedder.spec)
    elif database is None or not database.ensure_schema_as_recorded():
        database = database or default_database()
        database.ensure_schema(default_embedder().spec)
    return database
