"""Process-wide defaults for the Python API and the CLI: settings, database and embedder from the
environment, each built once per process (the embedded server and the model load only once), also when the
first calls come from several threads at once."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder, embedder_from_settings
from dreaming_dagster.storage.database import Database

# Reentrant: the default recaller is built from the default database and embedder.
_BUILDING = threading.RLock()


def cache(build: Callable) -> Callable:
    """``functools.cache`` whose first calls from several threads build the value once (functools.cache alone
    lets each racing thread build its own: two embedded-server handles at once fail)."""
    cached = functools.cache(build)

    @functools.wraps(build)
    def once():
        with _BUILDING:
            return cached()

    once.cache_info, once.cache_clear = cached.cache_info, cached.cache_clear
    return once


@cache
def default_settings() -> DreamingSettings:
    return DreamingSettings()


@cache
def default_database() -> Database:
    settings = default_settings()
    return Database.from_settings(settings, pool_size=settings.database_connections)


@cache
def default_embedder() -> Embedder:
    return embedder_from_settings(default_settings())


@cache
def default_recaller():
    from dreaming_dagster.retrieval.recaller import Recaller

    return Recaller.from_settings(default_database(), default_embedder(), default_settings())


def reset_defaults() -> None:
    """Forget cached defaults (after the environment changed, e.g. in tests)."""
    if default_recaller.cache_info().currsize:
        default_recaller().close()
    if default_database.cache_info().currsize:
        default_database().close()
    for func in (default_settings, default_database, default_embedder, default_recaller):
        func.cache_clear()
