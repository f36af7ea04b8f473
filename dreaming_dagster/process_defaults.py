"""Process-wide defaults for the Python API and the CLI: settings, database and embedder from the
environment, each built once per process (the embedded server and the model load only once), also when the
first calls come from several threads at once. The default recaller is retrieval's, made with :func:`cache`."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder, embedder_from_settings
from dreaming_dagster.storage.database import Database

# Reentrant: a default may be built from others (the default recaller from the default database and embedder).
_BUILDING = threading.RLock()
# Every default made by `cache`, in the order their modules defined them: reset_defaults closes them in reverse.
_DEFAULTS: list[Callable] = []


def cache(build: Callable | None = None, *, close: Callable | None = None) -> Callable:
    """``functools.cache`` whose first calls from several threads build the value once (functools.cache alone
    lets each racing thread build its own: two embedded-server handles at once fail). ``close`` releases a
    built value when :func:`reset_defaults` forgets it."""
    if build is None:
        return functools.partial(cache, close=close)
    cached = functools.cache(build)

    @functools.wraps(build)
    def once():
        with _BUILDING:
            return cached()

    once.cache_info, once.cache_clear, once.close = cached.cache_info, cached.cache_clear, close
    _DEFAULTS.append(once)
    return once


@cache
def default_settings() -> DreamingSettings:
    return DreamingSettings()


@cache(close=Database.close)
def default_database() -> Database:
    return Database.from_settings(default_settings())


@cache
def default_embedder() -> Embedder:
    return embedder_from_settings(default_settings())


def reset_defaults() -> None:
    """Forget cached defaults (after the environment changed, e.g. in tests), closing what they hold."""
    for default in reversed(_DEFAULTS):  # a later default may hold an earlier one's resources
        if default.close is not None and default.cache_info().currsize:
            default.close(default())
        default.cache_clear()
