"""dreaming-dagster: background memory consolidation for AI companions, orchestrated by Dagster."""

from dreaming_dagster.ingest.records import InvalidInputError, MemoryPair, Rejection
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs


def sync_user(user_id: str, **kwargs):
    """Run every dreaming stage for ``user_id`` now (see :func:`dreaming_dagster.pipeline.sync.sync_user`)."""
    from dreaming_dagster.pipeline.sync import sync_user as run

    return run(user_id, **kwargs)


def save_and_sync(user_id: str, pairs, kg_id: str = "default", **kwargs):
    """Save ``pairs`` and dream them at once (see :func:`dreaming_dagster.pipeline.sync.save_and_sync`)."""
    from dreaming_dagster.pipeline.sync import save_and_sync as run

    return run(user_id, pairs, kg_id, **kwargs)


def recall(user_id: str, query: str, k: int = 10, session_id: str | None = None, as_of=None,
           kg_id: str = "default"):
    """The ``k`` best memories for ``query`` (see :func:`dreaming_dagster.retrieval.recall`)."""
    from dreaming_dagster.retrieval import recall as run

    return run(user_id, query, k, session_id=session_id, as_of=as_of, kg_id=kg_id)


__all__ = ["BatchRejectedError", "InvalidInputError", "MemoryPair", "Rejection", "SaveResult", "recall",
           "save_and_sync", "save_pairs", "sync_user"]
