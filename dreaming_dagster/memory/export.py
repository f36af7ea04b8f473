"""Export and import: a user's whole memory as JSONL that another instance takes in with ``dreaming ingest``.

The file's first line is a header (``{"export": {...}}``); then one line per pair in the ingest format
(``session_id, turn_index, user_message, assistant_message, occurred_at, metadata``) with a ``dream`` field
holding what dreaming made of it (summary, extracted subjects, dated events, index keys, linked subjects by
reference);
then one ``{"subject": {...}}`` line per subject, archived ones included. Vectors are not exported: the
importing instance embeds with its own model (the keys' too).

Importing saves the pairs through the ordinary save path (a pair already there is a duplicate; words indexed at
once, vectors now or, with ``embed=False``, by the next dream's embedding stage), then, into a
graph that has no subjects yet, the subjects, links, extractions and dated events as they were, with every
stage's checkpoint set, so nothing is extracted again (no LLM call) and recall ranks as on the source. Into
a graph that already has subjects only the pairs are saved, and dreaming makes their graph.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime

from psycopg.types.json import Jsonb

from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.embeddings import Embedder, embed_cached, subject_embedding_text
from dreaming_dagster.extraction.keys import KINDS as KEY_KINDS
from dreaming_dagster.extraction.keys import Key
from dreaming_dagster.ingest.save import SaveResult, embed_or_none, save_validated_pairs
from dreaming_dagster.memory import ready_database
from dreaming_dagster.memory.inspection import jsonable
from dreaming_dagster.pipeline.batches import write_pair_times
from dreaming_dagster.pipeline.keying import key_vectors, write_keys
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import (
    MAX_MESSAGE_CHARS,
    MAX_TURN_INDEX,
    InvalidInputError,
    MemoryPair,
    checked_text,
    parse_pair,
    parse_timestamp,
    validate_identifier,
    validate_new_identifier,
)
from dreaming_dagster.storage.storable import json_problem, text_problem
from dreaming_dagster.storage.user_graphs import user_graph_lock

FORMAT = "dreaming-memory"
VERSION = 1
CHUNK = 256
MAX_SUBJECT_CHARS = 1000


def export_lines(user_id: str, kg_id: str = "default", *, database: Database | None = None) -> Iterator[str]:
    """The user's graph ``kg_id`` as JSONL lines (without newlines): header, pairs, subjects. The pairs stream
    from a server-side cursor, so a large memory is never held whole; everything is read in one snapshot."""
    params = {"user_id": validate_identifier(user_id, "user_id"), "kg_id": validate_identifier(kg_id, "kg_id")}
    with ready_database(database).connect(vectors=False) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        subjects = conn.execute(load_sql("export/subjects"), params).fetchall()
        refs = {row["subject_id"]: f"s{n}" for n, row in enumerate(subjects, 1)}
        yield _line({"export": {"format": FORMAT, "version": VERSION, "user_id": user_id, "kg_id": kg_id,
                                "exported_at": datetime.now(UTC), "subjects": len(subjects),
                                "pairs": conn.execute(load_sql("export/pair_count"), params).fetchone()["pairs"]}})
        with conn.cursor(name="export_pairs") as pairs:
            pairs.itersize = CHUNK
            pairs.execute(load_sql("export/pairs"), params)
            for row in pairs:
                yield _pair_line(row, refs)
    for row in subjects:
        subject = {k: v for k, v in row.items() if k not in ("subject_id", "merged_into", "superseded_by")}
        yield _line({"subject": subject | {"ref": refs[row["subject_id"]],
                                           "merged_into": refs.get(row["merged_into"]),
                                           "superseded_by": refs.get(row["superseded_by"])}})


def _pair_line(row: dict, refs: dict[str, str]) -> str:
    extracted = row["extracted_subjects"] if isinstance(row["extracted_subjects"], list) else None
    return _line({
        "session_id": row["session_id"], "turn_index": row["turn_index"], "occurred_at": row["occurred_at"],
        "user_message": row["user_message"], "assistant_message": row["assistant_message"],
        "metadata": row["metadata"] or {},
        "dream": {"summary": row["summary"], "extracted": row["extracted"], "linked": row["linked"],
                  "dated": row["dated"], "times": row["times"], "keyed": row["keyed"], "keys": row["keys"],
                  "extracted_subjects": [_with_ref(item, refs) for item in extracted] if extracted is not None
                  else None,
                  "subjects": [refs[s] for s in row["subject_ids"] if s in refs]}})


def is_export(first_record: object) -> bool:
    """Whether a JSONL file's first record is an export's header."""
    return isinstance(first_record, dict) and isinstance(first_record.get("export"), dict) \
        and first_record["export"].get("format") == FORMAT


@dataclass
class Imported:
    saved: SaveResult
    subjects: int = 0
    links: int = 0
    graph_imported: bool = False  # False: the graph already had subjects; dreaming makes the pairs' graph


def import_records(records: Iterable[tuple[str, object]], user_id: str, kg_id: str = "default", *,
                   database: Database | None = None, embedder: Embedder | None = None, embed: bool = True,
                   batch_size: int = 64) -> Imported:
    """Import an export's records ((where, record) in file order, the header first) as ``user_id``'s memory in
    the graph ``kg_id``. The whole file is checked first (:func:`read_export`: a bad record is refused with
    its line and field named); then everything is stored in one transaction, so a failure stores nothing."""
    from dreaming_dagster.process_defaults import default_embedder

    user_id, kg_id = validate_new_identifier(user_id, "user_id"), validate_new_identifier(kg_id, "kg_id")
    embedder = embedder or default_embedder()
    database = ready_database(database, embedder)
    pairs, dreams, subjects = read_export(records)
    result = Imported(saved=SaveResult())
    params = {"user_id": user_id, "kg_id": kg_id}
    # Every vector before the transaction: from its first insert it holds the word index's lock, one of 256
    # buckets other users' saves and forgets share, and no one should wait for the model.
    with database.connect() as conn:
        known = {row["content_hash"] for row in conn.execute(load_sql("memory_pairs/existing_content_hashes"), {
            **params, "content_hashes": [p.content_hash for p in pairs]})}
    new_pairs = [p for p in pairs if p.content_hash not in known]
    pair_vectors = dict(zip([p.content_hash for p in new_pairs], embed_or_none(embedder, new_pairs, batch_size),
                            strict=True)) if embed else {}
    subject_vectors = embed_cached(embedder, [subject_embedding_text(s["name"]) for s in subjects])
    # The keying stage's keys are deterministic: with embed=False the next dream writes them. An LLM's fact
    # keys come with an extracted pair and no stage would write them again: they are written either way.
    keys = [(pair.content_hash, Key(key["kind"], key["position"], key["text"]))
            for pair, dream in zip(pairs, dreams, strict=True) for key in dream.get("keys") or []
            if (dream.get("extracted") if key["kind"] == "fact" else embed and dream.get("keyed"))]
    vectors_of_keys = key_vectors(embedder, keys)
    with user_graph_lock(database, user_id, kg_id), database.connect() as conn, conn.transaction():
        for start in range(0, len(pairs), CHUNK):
            result.saved.merge(save_validated_pairs(database, embedder, user_id, kg_id, pairs[start:start + CHUNK],
                                                    embed=embed, batch_size=batch_size, index_words=True,
                                                    connection=conn, vectors=pair_vectors))
        if conn.execute(load_sql("export/graph_subject_count"), params).fetchone()["subjects"]:
            return result
        ids = {row["content_hash"]: row["id"] for row in conn.execute(load_sql("export/pair_ids_by_hash"), {
            **params, "hashes": [p.content_hash for p in pairs]})}
        new_ids = {}
        for subject, vector in zip(subjects, subject_vectors, strict=True):
            new_ids[subject["ref"]] = conn.execute(load_sql("export/insert_subject"), {
                **params, **{k: subject.get(k) for k in _SUBJECT_FIELDS}, "embedding": vector}).fetchone()["id"]
        for subject in subjects:
            if subject.get("merged_into") or subject.get("superseded_by"):
                conn.execute(load_sql("export/subject_references"), {
                    **params, "id": new_ids[subject["ref"]], "merged_into": new_ids.get(subject.get("merged_into")),
                    "superseded_by": new_ids.get(subject.get("superseded_by"))})
        for pair, dream in zip(pairs, dreams, strict=True):
            pair_id = ids[pair.content_hash]
            extracted = dream.get("extracted_subjects")
            if extracted is not None:
                extracted = [dict(item, subject_id=str(new_ids[item["subject_id"]]))
                             if item.get("subject_id") in new_ids else item for item in extracted]
            conn.execute(load_sql("export/pair_dreamed"), {
                **params, "pair_id": pair_id, "summary": dream.get("summary"),
                "extracted_subjects": Jsonb(extracted) if extracted is not None else None,
                "extracted": bool(dream.get("extracted")), "linked": bool(dream.get("linked")),
                "dated": bool(dream.get("dated")), "keyed": embed and bool(dream.get("keyed"))})
            for source in ("text", "llm"):
                times = [t for t in dream.get("times") or [] if t["source"] == source]
                if times:
                    write_pair_times(conn, user_id, kg_id, source,
                                     [(pair_id, t["position"], t["expression"], _time_range(t)) for t in times])
            for ref in dream.get("subjects") or []:
                result.links += conn.execute(load_sql("export/insert_link"), {
                    **params, "subject_id": new_ids[ref], "pair_id": pair_id}).rowcount
        write_keys(conn, user_id, kg_id, [(ids[content_hash], key) for content_hash, key in keys], vectors_of_keys)
        result.subjects, result.graph_imported = len(subjects), True
    refresh_profile(database, user_id, kg_id, centroid_tolerance=0.0)
    return result


def read_export(records: Iterable[tuple[str, object]]) -> tuple[list[MemoryPair], list[dict], list[dict]]:
    """Check a whole export before anything is stored and split it: the pairs (each checked as any saved pair),
    their dreams and the subjects. Refused (:class:`InvalidInputError` naming the line and field): a first line
    that is no header of this format and version; header counts the file does not hold; a subject ref or a
    live subject's name twice; a pair twice; a reference to a subject the file does not hold; a value of a
    subject or a dream the database could not store."""
    header, header_where = None, None
    pairs, dreams, subjects = [], [], []
    refs: dict[str, str] = {}  # ref → where
    live_names: dict[str, str] = {}
    hashes: dict[str, str] = {}
    references: list[tuple[str, str, str]] = []  # (ref, field, where) to check once every subject is read
    for n, (where, record) in enumerate(records):
        if n == 0:
            header, header_where = _header(record, where), where
            continue
        if not isinstance(record, dict):
            raise InvalidInputError("record", "must be an object", where)
        if "subject" in record:
            subject = _subject(record, where)
            if subject["ref"] in refs:
                raise InvalidInputError("subject.ref", f"{subject['ref']!r} is also the ref of {refs[subject['ref']]}",
                                        where)
            refs[subject["ref"]] = where
            if subject["archived_at"] is None:
                if subject["name"] in live_names:
                    raise InvalidInputError("subject.name", f"{subject['name'][:60]!r} is also the name of the live "
                                            f"subject of {live_names[subject['name']]}", where)
                live_names[subject["name"]] = where
            references += [(subject[key], f"subject.{key}", where) for key in ("merged_into", "superseded_by")
                           if subject[key] is not None]
            subjects.append(subject)
            continue
        pair = parse_pair({k: v for k, v in record.items() if k != "dream"}, where)
        if pair.content_hash in hashes:
            raise InvalidInputError("record", f"repeats the pair of {hashes[pair.content_hash]}", where)
        hashes[pair.content_hash] = where
        dream = _dream(record.get("dream"), where)
        references += [(ref, "dream.subjects", where) for ref in dream["subjects"]]
        references += [(item["subject_id"], "dream.extracted_subjects", where) for item in dream["extracted_subjects"]
                       or [] if isinstance(item, dict) and _is_ref(item.get("subject_id"))]
        pairs.append(pair)
        dreams.append(dream)
    if header is None:
        raise InvalidInputError("export", "the file is empty: an export starts with its header line")
    for ref, field_name, where in references:
        if ref not in refs:
            raise InvalidInputError(field_name, f"names the subject {str(ref)[:40]!r}, which the file does not hold",
                                    where)
    for name, found in (("pairs", len(pairs)), ("subjects", len(subjects))):
        if header[name] != found:
            raise InvalidInputError(f"export.{name}", f"the header counts {header[name]:,} {name}; the file holds "
                                    f"{found:,} (cut short or joined with another file?)", header_where)
    return pairs, dreams, subjects


# ------------------------------------------------------------------------------------------------ internals
_SUBJECT_FIELDS = ("name", "description", "type", "key_subject", "importance", "created_at", "last_seen_at",
                   "reinforcement_count", "refined_at", "pinned", "archived_at", "archive_reason", "hub_since")


def _line(record: dict) -> str:
    return json.dumps(jsonable(record), ensure_ascii=False)


def _with_ref(item: object, refs: dict[str, str]) -> object:
    """An extracted subject with the ref of the subject it became; an id the file holds no subject of (one
    deleted since) is left out, and the importer reads the item as not merged yet."""
    if not isinstance(item, dict) or "subject_id" not in item:
        return item
    subject_id = item["subject_id"]
    return {k: v for k, v in item.items() if k != "subject_id"} | (
        {"subject_id": refs[subject_id]} if subject_id in refs else {})


def _header(record: object, where: str) -> dict:
    if not is_export(record):
        raise InvalidInputError("export", "the first line is not an export header", where)
    header = record["export"]
    if header.get("version") != VERSION or isinstance(header.get("version"), bool):
        raise InvalidInputError("export.version", f"is {str(header.get('version'))[:20]!r}; this instance reads "
                                f"version {VERSION}", where)
    for name in ("pairs", "subjects"):
        if isinstance(header.get(name), bool) or not isinstance(header.get(name), int) or header[name] < 0:
            raise InvalidInputError(f"export.{name}", "must be a count (an integer ≥ 0)", where)
    return header


def _is_ref(value: object) -> bool:
    return isinstance(value, str) and bool(_REF.fullmatch(value))


_REF = re.compile(r"s\d{1,9}")


def _subject(record: dict, where: str) -> dict:
    """A subject line's fields checked as its columns would take them."""
    subject = record["subject"]
    if not isinstance(subject, dict):
        raise InvalidInputError("subject", "must be an object", where)

    def check(name: str, test, wanted: str, default=None):
        value = subject.get(name, default)
        if not test(value):
            raise InvalidInputError(f"subject.{name}", f"must be {wanted}, got {str(value)[:40]!r}", where)
        return value

    checked = {
        "ref": check("ref", _is_ref, "a ref such as 's12'"),
        "name": _text(subject.get("name"), "subject.name", where, max_chars=MAX_SUBJECT_CHARS, required=True),
        "description": _text(subject.get("description") or "", "subject.description", where,
                             max_chars=MAX_MESSAGE_CHARS),
        "type": _text(subject.get("type") or "other", "subject.type", where, max_chars=MAX_SUBJECT_CHARS),
        "key_subject": check("key_subject", lambda v: isinstance(v, bool), "true or false", False),
        "importance": check("importance", lambda v: _number(v) and 0 <= v <= 1, "a number from 0 to 1", 0.5),
        "reinforcement_count": check("reinforcement_count", lambda v: _integer(v) and 0 <= v <= MAX_TURN_INDEX,
                                     f"an integer from 0 to {MAX_TURN_INDEX}", 1),
        "pinned": check("pinned", lambda v: isinstance(v, bool), "true or false", False),
        "archive_reason": None if subject.get("archive_reason") is None else _text(
            subject["archive_reason"], "subject.archive_reason", where, max_chars=MAX_SUBJECT_CHARS),
        "merged_into": check("merged_into", lambda v: v is None or _is_ref(v), "a subject ref or null"),
        "superseded_by": check("superseded_by", lambda v: v is None or _is_ref(v), "a subject ref or null"),
    }
    times = {key: _timestamp(subject.get(key), key, where) for key in _TIMES}
    now = datetime.now(UTC)  # the two times every subject has, when a file leaves them out
    return checked | times | {"created_at": times["created_at"] or now, "last_seen_at": times["last_seen_at"] or now}


def _dream(dream: object, where: str) -> dict:
    """A pair line's ``dream``: what dreaming made of it, checked as its tables would take it."""
    dream = {} if dream is None else dream
    if not isinstance(dream, dict):
        raise InvalidInputError("dream", "must be an object", where)
    for flag in ("extracted", "linked", "dated", "keyed"):
        if not isinstance(dream.get(flag, False), bool):
            raise InvalidInputError(f"dream.{flag}", "must be true or false", where)
    summary = dream.get("summary")
    if summary is not None:
        _text(summary, "dream.summary", where, max_chars=MAX_MESSAGE_CHARS)
    subjects = dream.get("subjects") or []
    if not isinstance(subjects, list) or not all(_is_ref(ref) for ref in subjects):
        raise InvalidInputError("dream.subjects", "must be a list of subject refs", where)
    if len(set(subjects)) != len(subjects):
        raise InvalidInputError("dream.subjects", "names a subject twice", where)
    extracted = _extracted_subjects(dream.get("extracted_subjects"), where)
    _checked_items(dream, "times", "an event", _time_identity, where)
    keys = _checked_items(dream, "keys", "a key", _key_identity, where)
    return dream | {"subjects": subjects, "keys": keys, "extracted_subjects": extracted}


def _extracted_subjects(extracted: object, where: str) -> list[dict] | None:
    """A dream's ``extracted_subjects`` as the merge and link stages read them: each item an extractor's
    subject (name, description, type; checked and normalised as an extractor's answer is) and, once merged,
    the ref of the file's subject it became. Anything else is refused naming the item, so no imported pair can
    stop the user's later dreams."""
    from pydantic import ValidationError

    from dreaming_dagster.extraction.schema import MAX_SUBJECTS, ExtractedSubject

    if extracted is None:
        return None
    if not isinstance(extracted, list):
        raise InvalidInputError("dream.extracted_subjects", "must be a list", where)
    if len(extracted) > MAX_SUBJECTS:
        raise InvalidInputError("dream.extracted_subjects", f"holds {len(extracted)} subjects; at most "
                                f"{MAX_SUBJECTS}", where)
    items = []
    for n, item in enumerate(extracted):
        field_name = f"dream.extracted_subjects[{n}]"
        if not isinstance(item, dict):
            raise InvalidInputError(field_name, f"must be an object (name, description, type, subject_id), got "
                                    f"{str(item)[:40]!r}", where)
        unknown = sorted(set(item) - {"name", "description", "type", "subject_id"})
        if unknown:
            raise InvalidInputError(f"{field_name}.{unknown[0]}", "is not a field of an extracted subject", where)
        try:
            subject = ExtractedSubject.model_validate({k: v for k, v in item.items() if k != "subject_id"})
        except ValidationError as error:
            first = error.errors()[0]
            place = ".".join(str(part) for part in first["loc"]) or "name"
            raise InvalidInputError(f"{field_name}.{place}", first["msg"], where) from None
        problem = json_problem(subject.model_dump())
        if problem:
            raise InvalidInputError(field_name, problem, where)
        if item.get("subject_id") is not None and not _is_ref(item["subject_id"]):
            raise InvalidInputError(f"{field_name}.subject_id", "must be the ref of a subject of this file (such as "
                                    f"'s12') or null, got {str(item['subject_id'])[:40]!r}", where)
        items.append(subject.model_dump() | ({"subject_id": item["subject_id"]} if item.get("subject_id") else {}))
    return items


def _checked_items(dream: dict, name: str, what: str, identity, where: str) -> list:
    """A dream's list ``name``, each item checked as its table would take it: ``identity`` gives the item's
    key, or None when the item cannot be stored; an item repeating a key is refused too."""
    items = dream.get(name) or []
    if not isinstance(items, list):
        raise InvalidInputError(f"dream.{name}", "must be a list", where)
    seen = set()
    for item in items:
        try:
            key = identity(item)
        except (KeyError, TypeError, ValueError, AttributeError):
            key = None
        if key is None or key in seen:
            raise InvalidInputError(f"dream.{name}", f"holds {what} this instance cannot store: {str(item)[:80]}",
                                    where)
        seen.add(key)
    return items


def _time_identity(t: dict) -> tuple | None:
    _time_range(t)  # the dates, their order and the granularity
    valid = (t["source"] in ("text", "llm") and _integer(t["position"]) and 0 <= t["position"] <= MAX_TURN_INDEX
             and isinstance(t["expression"], str) and 1 <= len(t["expression"].strip()) <= 200
             and not text_problem(t["expression"]) and _number(t["certainty"]) and 0 < t["certainty"] <= 1)
    return (t["source"], t["position"]) if valid else None


def _key_identity(k: dict) -> tuple | None:
    valid = (k["kind"] in KEY_KINDS and _integer(k["position"]) and 0 <= k["position"] <= MAX_TURN_INDEX
             and isinstance(k["text"], str) and 1 <= len(k["text"]) <= 400 and not text_problem(k["text"]))
    return (k["kind"], k["position"]) if valid else None


def _text(value: object, name: str, where: str, *, max_chars: int, required: bool = False) -> str:
    try:
        return checked_text(value, name, max_chars=max_chars, if_blank="is required" if required else None)
    except InvalidInputError as error:
        raise InvalidInputError(error.field, error.reason, where) from None


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TIMES = ("created_at", "last_seen_at", "refined_at", "archived_at", "hub_since")


def _timestamp(value: object, name: str, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value, f"subject.{name}")
    except InvalidInputError as error:
        raise InvalidInputError(error.field, error.reason, where) from None


def _time_range(t: dict) -> TimeRange:
    return TimeRange(first_day=date.fromisoformat(t["first_day"]), last_day=date.fromisoformat(t["last_day"]),
                     granularity=t["granularity"], certainty=float(t["certainty"]))
