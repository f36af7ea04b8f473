"""dreaming-dagster: background memory consolidation for AI companions, orchestrated by Dagster."""

import os

# ONNX Runtime records telemetry in a SQLite file it opens on import (and would send it): nothing here sends
# anything, and a forked run worker must not inherit an open database file. Set it to 0 to allow it.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs
from dreaming_dagster.storage.records import InvalidInputError, MemoryPair, Rejection


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


def forget_pairs(user_id: str, pair_ids, kg_id: str = "default", **kwargs):
    """Delete pairs and what was derived from them (see :func:`dreaming_dagster.memory.forgetting.forget_pairs`)."""
    from dreaming_dagster.memory.forgetting import forget_pairs as run

    return run(user_id, pair_ids, kg_id, **kwargs)


def forget_session(user_id: str, session_id: str, kg_id: str = "default", **kwargs):
    """Delete a session's pairs (see :func:`dreaming_dagster.memory.forgetting.forget_session`)."""
    from dreaming_dagster.memory.forgetting import forget_session as run

    return run(user_id, session_id, kg_id, **kwargs)


def erase_user(user_id: str, kg_id: str | None = None, **kwargs):
    """Erase a user's graph ``kg_id``, or all of them (see :func:`dreaming_dagster.memory.forgetting.erase_user`)."""
    from dreaming_dagster.memory.forgetting import erase_user as run

    return run(user_id, kg_id, **kwargs)


def list_pairs(user_id: str, kg_id: str = "default", **kwargs):
    """A page of the user's pairs (see :func:`dreaming_dagster.memory.inspection.list_pairs`)."""
    from dreaming_dagster.memory.inspection import list_pairs as run

    return run(user_id, kg_id, **kwargs)


def read_pair(user_id: str, pair_id: str, kg_id: str = "default", **kwargs):
    """One pair with its subjects and dated events (see :func:`dreaming_dagster.memory.inspection.read_pair`)."""
    from dreaming_dagster.memory.inspection import read_pair as run

    return run(user_id, pair_id, kg_id, **kwargs)


def list_subjects(user_id: str, kg_id: str = "default", **kwargs):
    """The user's subjects, most linked first (see :func:`dreaming_dagster.memory.inspection.list_subjects`)."""
    from dreaming_dagster.memory.inspection import list_subjects as run

    return run(user_id, kg_id, **kwargs)


def read_subject(user_id: str, subject_id: str, kg_id: str = "default", **kwargs):
    """One subject with its pairs (see :func:`dreaming_dagster.memory.inspection.read_subject`)."""
    from dreaming_dagster.memory.inspection import read_subject as run

    return run(user_id, subject_id, kg_id, **kwargs)


def export_user(user_id: str, kg_id: str = "default", **kwargs):
    """The user's graph as JSONL lines (see :func:`dreaming_dagster.memory.export.export_lines`)."""
    from dreaming_dagster.memory.export import export_lines as run

    return run(user_id, kg_id, **kwargs)


__all__ = ["BatchRejectedError", "InvalidInputError", "MemoryPair", "Rejection", "SaveResult", "erase_user",
           "export_user", "forget_pairs", "forget_session", "list_pairs", "list_subjects", "read_pair", "read_subject",
           "recall", "save_and_sync", "save_pairs", "sync_user"]
