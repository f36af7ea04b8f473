"""dreaming-dagster: background memory consolidation for AI companions, orchestrated by Dagster."""

from dreaming_dagster.ingest.records import InvalidInputError, MemoryPair, Rejection
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs


def sync_user(user_id: str, **kwargs):
    """Run every dreaming stage for ``user_id`` now (see :func:`dreaming_dagster.graph.sync.sync_user`)."""
    from dreaming_dagster.graph.sync import sync_user as run

    return run(user_id, **kwargs)


__all__ = ["BatchRejectedError", "InvalidInputError", "MemoryPair", "Rejection", "SaveResult", "save_pairs",
           "sync_user"]
