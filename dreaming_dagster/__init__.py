"""dreaming-dagster: background memory consolidation for AI companions, orchestrated by Dagster."""

from dreaming_dagster.ingest.records import InvalidInputError, MemoryPair, Rejection
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs

__all__ = ["BatchRejectedError", "InvalidInputError", "MemoryPair", "Rejection", "SaveResult", "save_pairs"]
