"""Forgetting: pairs, a session, or a whole user deleted on request, with everything derived from them.

A user's words reach many tables (the pairs, their stages and dated events, the word index, subjects named
and described from them, links, the refinement queue, the consolidation audit, counts, the recall profile).
``forget_pairs`` and ``forget_session`` delete pairs and make the graph follow: a subject left with no pair
is deleted, a surviving one has its description rebuilt from its remaining pairs, words no pair holds any
more leave the vocabulary, the dreamer's own summaries that name a deleted subject are forgotten too, audit
rows that name one or quote what dreaming wrote from a forgotten pair lose their text, and the profile is
recomputed. ``erase_user`` deletes every row of the user's graphs set-based. Each graph is forgotten under
its graph lock (no sync interleaves) in one transaction (a crash leaves all of it or none; re-running
completes it), and leaves one row in ``forget_log`` — counts only, and for an erasure no user id (an erasure
also takes the user id off the rows of the user's earlier forgets). Recall processes drop what they hold at
their next recall (the word index's versions for pairs; forget_log for erasures: retrieval/lexical_postings.py).
A deleted subject's name is matched as a whole word wherever forgetting looks for it (``word_patterns``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime

import psycopg

from dreaming_dagster.embeddings import Embedder, embed_cached, forget_cached_texts, subject_embedding_text
from dreaming_dagster.memory import ready_database
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import (
    DREAM_SESSION,
    MAX_SESSION_ID_CHARS,
    InvalidInputError,
    checked_text,
    validate_identifier,
)
from dreaming_dagster.storage.user_graphs import user_graph_lock

NameVectors = Callable[[list[str]], list]
# How many pair ids one forget_pairs call takes (a session or an erasure has no limit).
MAX_PAIR_IDS = 10_000


@dataclass
class Forgotten:
    """What a forget request deleted (summed over the graphs it covered)."""

    user_id: str
    scope: str  # pairs | session | user
    kg_ids: list[str] = field(default_factory=list)
    pairs: int = 0
    subjects_deleted: int = 0
    subjects_rebuilt: int = 0
    passes_redacted: int = 0
    pair_ids: list[str] = field(default_factory=list)  # the pairs deleted (pairs and session scopes)
    missing: list[str] = field(default_factory=list)  # pair ids asked for that the graph does not hold
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def forget_pairs(user_id: str, pair_ids: Iterable[str], kg_id: str = "default", *,
                 database: Database | None = None, embedder: Embedder | None = None) -> Forgotten:
    """Delete the user's pairs ``pair_ids`` from the graph ``kg_id`` and everything derived from them.
    Ids the graph does not hold (another user's, another tenant's, already forgotten) are listed in
    ``missing`` and touch nothing. ``embedder`` (default: the process's) embeds the names subjects get back
    when a consolidation pass had renamed them from forgotten text."""
    user_id, kg_id = validate_identifier(user_id, "user_id"), validate_identifier(kg_id, "kg_id")
    ids = _pair_ids(pair_ids)
    result = Forgotten(user_id=user_id, scope="pairs")
    _forget(ready_database(database), result, kg_id, {"pair_ids": ids, "session_id": None}, embedder)
    result.missing = sorted(set(ids) - set(result.pair_ids)) if ids else []
    return result


def forget_session(user_id: str, session_id: str, kg_id: str = "default", *,
                   database: Database | None = None, embedder: Embedder | None = None) -> Forgotten:
    """Delete every pair of the user's session ``session_id`` in the graph ``kg_id``, as ``forget_pairs``."""
    user_id, kg_id = validate_identifier(user_id, "user_id"), validate_identifier(kg_id, "kg_id")
    checked_text(session_id, "session_id", max_chars=MAX_SESSION_ID_CHARS, if_blank="is required (a non-empty string)")
    result = Forgotten(user_id=user_id, scope="session")
    _forget(ready_database(database), result, kg_id, {"pair_ids": None, "session_id": session_id}, embedder)
    return result


def erase_user(user_id: str, kg_id: str | None = None, *, database: Database | None = None) -> Forgotten:
    """Erase the user: every row of their graph ``kg_id`` (a tenant's), or of all their graphs (None, the
    operator's). Idempotent: erasing a user with nothing stored deletes nothing."""
    user_id = validate_identifier(user_id, "user_id")
    kg_id = validate_identifier(kg_id, "kg_id") if kg_id is not None else None
    database = ready_database(database)
    started = time.perf_counter()
    result = Forgotten(user_id=user_id, scope="user")
    for kg in [kg_id] if kg_id else _user_graphs(database, user_id):
        params = {"user_id": user_id, "kg_id": kg}
        with user_graph_lock(database, user_id, kg), database.connect(vectors=False) as conn, conn.transaction():
            conn.execute("SET LOCAL dreaming.erasing_graph TO 'on'")
            conn.execute(load_sql("forget/lock_word_index"), params)
            counts = conn.execute(load_sql("forget/erase_graph"), params).fetchone()
            conn.execute(load_sql("forget/erase_graph_subjects"), params)
            conn.execute(load_sql("forget/erase_graph_pairs"), params)
            conn.execute(load_sql("forget/delete_graph_counts"), params)
            if not counts["pairs"] and not counts["subjects"]:
                continue  # what was left (counts, state) is gone; nothing to count or to tell recall processes
            _record(conn, "user", params, pairs=counts["pairs"], subjects_deleted=counts["subjects"])
        result.kg_ids.append(kg)
        result.pairs += counts["pairs"]
        result.subjects_deleted += counts["subjects"]
    # After the graphs, and whether or not any was left (the user may have forgotten every pair before): a
    # re-run after a crash here completes it.
    with database.connect(vectors=False) as conn:
        conn.execute(load_sql("forget/scrub_forget_log"), {"user_id": user_id, "kg_id": kg_id})
        if kg_id is None:  # the whole user: off the user lists of Dagster bucket runs too
            conn.execute(load_sql("dagster/forget_bucket_run_user"), {"user_id": user_id})
    forget_cached_texts()
    result.seconds = round(time.perf_counter() - started, 3)
    return result


# ------------------------------------------------------------------------------------------------ internals
def _user_graphs(database: Database, user_id: str) -> list[str]:
    with database.connect(vectors=False) as conn:
        return [row["kg_id"] for row in conn.execute(load_sql("forget/user_graphs"), {"user_id": user_id})]


def _forget(database: Database, result: Forgotten, kg_id: str, selection: dict, embedder: Embedder | None) -> None:
    started = time.perf_counter()
    params = {"user_id": result.user_id, "kg_id": kg_id, **selection}

    def name_vectors(names: list[str]) -> list:
        nonlocal embedder
        if not names:
            return []
        if embedder is None:
            from dreaming_dagster.process_defaults import default_embedder

            embedder = default_embedder()
            database.ensure_schema(embedder.spec)  # refuses a model other than the one the memory records
        return list(embed_cached(embedder, [subject_embedding_text(name) for name in names]))

    with user_graph_lock(database, result.user_id, kg_id), database.connect() as conn, conn.transaction():
        # The word index's lock before the pairs' row locks, in the order indexing takes them (a sync indexing
        # deferred pairs holds it while it adds their postings): the other order deadlocks.
        conn.execute(load_sql("forget/lock_word_index"), params)
        pairs = conn.execute(load_sql("forget/pairs_to_forget"), params).fetchall()
        if pairs:
            _forget_rows(conn, result, params, pairs, name_vectors)
            result.kg_ids.append(kg_id)
    forget_cached_texts()
    result.seconds = round(time.perf_counter() - started, 3)


def _forget_rows(conn: psycopg.Connection, result: Forgotten, params: dict, pairs: list[dict],
                 name_vectors: NameVectors) -> None:
    """Forget ``pairs`` and what follows from them: what consolidation passes wrote after reading their text
    (undone, and those passes' dream pairs forgotten), then the dreamer's summary pairs that name a subject this
    deleted, and so on until none is left (each round deletes only subjects its own pairs held)."""
    ids, tokens, deleted, touched, texts = [], 0, {}, set(), set()
    undone = PassWrites(since=min(row["ingested_at"] for row in pairs))
    while pairs:
        batch = {**params, "pair_ids": [row["id"] for row in pairs]}
        linked = [str(row["id"]) for row in conn.execute(load_sql("forget/linked_subjects"), batch)]
        texts |= {row["text"] for row in conn.execute(load_sql("forget/forgotten_texts"), batch)}
        conn.execute(load_sql("forget/delete_pairs"), batch)
        gone = {str(row["id"]): row["subject_text"] for row in conn.execute(
            load_sql("forget/delete_unlinked_subjects"), {**params, "subject_ids": linked})}
        ids += batch["pair_ids"]
        tokens += sum(row["token_count"] for row in pairs)
        touched |= set(linked)
        deleted |= gone
        passes_before = set(undone.passes)
        named_before = set(undone.old_names)
        _undo_pass_writes(conn, params, ids, touched, undone, name_vectors)
        deleted |= undone.deleted
        named = {**gone, **{k: v for k, v in undone.old_names.items() if k not in named_before}}
        pairs = conn.execute(load_sql("forget/dream_pairs_mentioning"), {
            **params, "dream_session": DREAM_SESSION, "name_patterns": word_patterns(named.values())}).fetchall() \
            if named else []
        new_passes = sorted(undone.passes - passes_before)
        if new_passes:
            taken = {row["id"] for row in pairs}
            pairs += [row for row in conn.execute(load_sql("forget/dream_pairs_of_passes"), {
                **params, "dream_session": DREAM_SESSION, "pass_ids": new_passes, "pair_ids": ids})
                if row["id"] not in taken]
    conn.execute(load_sql("forget/delete_unused_lexemes"), params)  # once, for every round's pairs
    surviving = sorted((touched | undone.restored) - deleted.keys())
    rebuilt = conn.execute(load_sql("forget/rebuild_descriptions"),
                           {**params, "subject_ids": surviving}).fetchall() if surviving else []
    redacted = conn.execute(load_sql("forget/redact_passes"), {
        **params, "name_patterns": word_patterns([*deleted.values(), *undone.old_names.values()]),
        "pass_ids": sorted(undone.passes), "needles": [*map(str, deleted), *map(str, ids), *texts]}).rowcount
    conn.execute(load_sql("forget/discount_tokens"), {**params, "tokens": tokens})
    # Deleted subjects leave the centroid without moving any vector_changed_at: recompute it now.
    conn.execute(load_sql("retrieval/refresh_profile"), {**params, "centroid_tolerance": 0.0 if deleted else 1.0})
    rebuilt_count = len({str(r["id"]) for r in rebuilt} | undone.renamed)
    _record(conn, result.scope, params, pairs=len(ids), subjects_deleted=len(deleted),
            subjects_rebuilt=rebuilt_count, passes_redacted=redacted)
    result.pair_ids += [str(i) for i in ids]
    result.pairs += len(ids)
    result.subjects_deleted += len(deleted)
    result.subjects_rebuilt += rebuilt_count
    result.passes_redacted += redacted


@dataclass
class PassWrites:
    """What a forget undid of the consolidation passes' writes, accumulated over its rounds."""

    since: datetime  # when the first forgotten pair was saved: no earlier pass read it
    tainted: set[str] = field(default_factory=set)  # subjects whose text came from forgotten memory
    passes: set[str] = field(default_factory=set)  # passes that read forgotten text
    deleted: dict[str, str] = field(default_factory=dict)  # subjects taken out whole, with their names
    restored: set[str] = field(default_factory=set)  # survivors given back their pairs' text
    renamed: set[str] = field(default_factory=set)
    old_names: dict[str, str] = field(default_factory=dict)  # the names passes gave, now gone


def _undo_pass_writes(conn: psycopg.Connection, params: dict, pair_ids: list, touched: set,
                      undone: PassWrites, name_vectors: NameVectors) -> None:
    """Every subject whose name or description a pass wrote from an input that held forgotten text — a
    forgotten pair's summary or dream, or a subject whose text came from forgotten memory, transitively — gets
    back what its remaining pairs say: the name their extraction gave it and a rebuilt description. A subject
    no pair names (the pass created it) is deleted; one whose given name another subject holds joins that one."""
    undone.tainted |= touched
    written: set[str] = set()  # a subject linked to a forgotten pair among them: its name may be a pass's too
    while True:
        rows = conn.execute(load_sql("forget/pass_writes_from"), {
            **params, "pair_ids": pair_ids, "subject_ids": sorted(undone.tainted), "since": undone.since}).fetchall()
        undone.passes |= {row["pass_id"] for row in rows}
        written |= {row["id"] for row in rows}
        if written <= undone.tainted:
            break
        undone.tainted |= written
    if not written:
        return
    rows = conn.execute(load_sql("forget/pair_given_names"), {**params, "subject_ids": sorted(written)}).fetchall()
    made = [row for row in rows if row["name"] is None]
    joining = [row for row in rows if row["name"] is not None and row["holder_id"] is not None]
    renamed = [row for row in rows if row["name"] not in (None, row["subject_text"]) and row["holder_id"] is None]
    if joining:
        conn.execute(load_sql("forget/move_links"), {**params, "subject_ids": [r["id"] for r in joining],
                                                     "holder_ids": [r["holder_id"] for r in joining]})
        undone.restored |= {row["holder_id"] for row in joining}
    if made or joining:
        undone.deleted |= {str(row["id"]): row["subject_text"] for row in conn.execute(
            load_sql("forget/delete_subjects"), {**params, "subject_ids": [r["id"] for r in made + joining]})}
    kept = [row for row in rows if row["name"] is not None and row["holder_id"] is None]
    if kept:
        vectors = dict(zip([r["id"] for r in renamed], name_vectors([r["name"] for r in renamed]), strict=True))
        conn.execute(load_sql("forget/restore_names"), {
            **params, "subject_ids": [r["id"] for r in kept], "names": [r["name"] for r in kept],
            "embeddings": [vectors.get(r["id"]) for r in kept]})
        undone.restored |= {row["id"] for row in kept}
        undone.renamed |= {row["id"] for row in renamed}
    undone.old_names |= {row["id"]: row["subject_text"] for row in rows if row["name"] != row["subject_text"]}


def _record(conn: psycopg.Connection, scope: str, params: dict, **counts: int) -> None:
    conn.execute(load_sql("forget/record_forget"), {
        "scope": scope, "kg_id": params["kg_id"], "user_id": params["user_id"], "pairs": 0, "subjects_deleted": 0,
        "subjects_rebuilt": 0, "passes_redacted": 0, **counts})


def word_patterns(names: Iterable[str]) -> list[str]:
    """Postgres regular expressions (for ``lower(text) ~ pattern``) matching each name as a whole word of a
    lower-cased text, with its last word in any regular inflection a stored (singular) name stands for: the
    plural ("Dog" → "dogs", "Berry" → "berries", "Box" → "boxes", but "Tim" never "times") and the possessive ("dog's", "dogs'"), but
    never inside another word ("Pea" in "speak", "Bay" in "eBay"). ASCII punctuation (every character a
    pattern gives a meaning) is escaped, so a name is never read as a pattern."""
    patterns = []
    for name in names:
        name = name.strip().lower()
        if not name:
            continue
        literal = "".join("\\" + c if c.isascii() and not c.isalnum() and not c.isspace() else c for c in name)
        if name[-1].isalpha():
            # A consonant + y pluralises as -ies ("berry"); English adds -es only after s, x, z, ch, sh and o
            # ("boxes", "potatoes"), so "Tim" never takes "times" nor "Hop" "hopes"; any other letter takes -s.
            if name.endswith("y") and len(name) > 1 and name[-2] not in "aeiou":
                literal = f"{literal[:-1]}(y|ies)"
            elif name.endswith(("s", "x", "z", "ch", "sh", "o")):
                literal = f"{literal}(s|es)?"
            else:
                literal = f"{literal}s?"
        patterns.append(f"(^|[^[:alnum:]_]){literal}($|[^[:alnum:]_])")
    return patterns


def _pair_ids(pair_ids: Iterable[str]) -> list[str]:
    if isinstance(pair_ids, str | bytes) or not isinstance(pair_ids, Iterable):
        raise InvalidInputError("pair_ids", "must be a list of pair ids")
    ids = []
    for n, value in enumerate(pair_ids):
        if n >= MAX_PAIR_IDS:
            raise InvalidInputError("pair_ids", f"at most {MAX_PAIR_IDS:,} ids a call")
        try:
            ids.append(str(uuid.UUID(str(value))))
        except ValueError:
            raise InvalidInputError(f"pair_ids[{n}]", f"is not a pair id (a UUID): {str(value)[:60]!r}") from None
    if not ids:
        raise InvalidInputError("pair_ids", "names no pair")
    return list(dict.fromkeys(ids))
