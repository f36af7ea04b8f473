"""Retrieval: the composite query, the ranker model and recall().

Nothing heavy is imported here: the dreaming pipeline imports :mod:`.profiles` without loading torch.
"""

from __future__ import annotations

from datetime import datetime
from operator import methodcaller
from typing import TYPE_CHECKING

from dreaming_dagster.process_defaults import cache, default_database, default_embedder, default_settings

if TYPE_CHECKING:
    from dreaming_dagster.retrieval.recaller import Recaller, RecallResult


@cache(close=methodcaller("close"))
def default_recaller() -> Recaller:
    """The process's recaller over the default database, embedder and settings (built once)."""
    from dreaming_dagster.retrieval.recaller import Recaller

    return Recaller.from_settings(default_database(), default_embedder(), default_settings())


def recall(user_id: str, query: str, k: int = 10, session_id: str | None = None,
           as_of: str | datetime | None = None, kg_id: str = "default") -> RecallResult:
    """The ``k`` best memories of ``user_id`` for ``query``, each with its signals and score.

    ``session_id`` is the caller's current chat session (its pairs get the same-session signal);
    ``as_of`` ranks the memory as it was at that time (only pairs before it; recency measured from it).
    Uses the environment's settings (``DREAMING_*``): database, embedder and ranker file.
    """
    return default_recaller().recall(user_id, query, k, session_id=session_id, as_of=as_of, kg_id=kg_id)


__all__ = ["default_recaller", "recall"]
