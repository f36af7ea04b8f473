"""Export and import: a user's whole memory as JSONL that another instance takes in with ``dreaming ingest``.

The file's first line is a header (``{"export": {...}}``); then one line per pair in the ingest format
(``session_id, turn_index, user_message, assistant_message, occurred_at, metadata``) with a ``dream`` field
holding what dreaming made of it (summary, extracted subjects, dated events, linked subjects by reference);
then one ``{"subject": {...}}`` line per subject, archived ones included. Vectors are not exported: the
importing instance embeds with its own model.

Importing saves the pairs through the ordinary save path (a pair already there is a duplicate; words indexed at
once, vectors now or, with ``embed=False``, by the next dream's embedding stage), then, into a
graph that has no subjects yet, the subjects, links, extractions and dated events as they were, with every
stage's checkpoint set, so nothing is extracted again (no LLM call) and recall ranks as on the source. Into
a graph that already has subjects only the pairs are saved, and dreaming makes their graph.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime

from psycopg.types.json import Jsonb

from dreaming_dagster.dates.expressions import TimeRange
from dreaming_dagster.embeddings import Embedder, embed_cached, subject_embedding_text
from dreaming_dagster.ingest.records import InvalidInputError, MemoryPair, parse_pair, validate_identifier
from dreaming_dagster.ingest.save import SaveResult, save_validated_pairs
from dreaming_dagster.memory import ready_database
from dreaming_dagster.memory.inspection import jsonable
from dreaming_dagster.pipeline.stages import user_graph_lock, write_pair_times
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

FORMAT = "dreaming-memory"
VERSION = 1
CHUNK = 256


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
                  "dated": row["dated"], "times": row["times"],
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
    the graph ``kg_id``. A record that is not valid is refused with the line and field named, before
    anything is stored."""
    from dreaming_dagster.config.runtime import default_embedder

    user_id, kg_id = validate_identifier(user_id, "user_id"), validate_identifier(kg_id, "kg_id")
    database, embedder = ready_database(database), embedder or default_embedder()
    pairs, dreams, subjects = _read(records)
    result = Imported(saved=SaveResult())
    for start in range(0, len(pairs), CHUNK):
        result.saved.merge(save_validated_pairs(database, embedder, user_id, kg_id, pairs[start:start + CHUNK],
                                                embed=embed, batch_size=batch_size, index_words=True))
    params = {"user_id": user_id, "kg_id": kg_id}
    with user_graph_lock(database, user_id, kg_id), database.connect() as conn, conn.transaction():
        if conn.execute(load_sql("export/graph_subject_count"), params).fetchone()["subjects"]:
            return result
        ids = {row["content_hash"]: row["id"] for row in conn.execute(load_sql("export/pair_ids_by_hash"), {
            **params, "hashes": [p.content_hash for p in pairs]})}
        vectors = embed_cached(embedder, [subject_embedding_text(s["name"]) for s in subjects])
        new_ids = {}
        for subject, vector in zip(subjects, vectors, strict=True):
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
                "dated": bool(dream.get("dated"))})
            for source in ("text", "llm"):
                times = [t for t in dream.get("times") or [] if t.get("source") == source]
                if times:
                    write_pair_times(conn, user_id, kg_id, source,
                                     [(pair_id, t["position"], t["expression"], _time_range(t)) for t in times])
            for ref in dream.get("subjects") or []:
                conn.execute(load_sql("export/insert_link"), {**params, "subject_id": new_ids[ref],
                                                              "pair_id": pair_id})
                result.links += 1
        result.subjects, result.graph_imported = len(subjects), True
    refresh_profile(database, user_id, kg_id, centroid_tolerance=0.0)
    return result


# ------------------------------------------------------------------------------------------------ internals
_SUBJECT_FIELDS = ("name", "description", "type", "key_subject", "importance", "created_at", "last_seen_at",
                   "reinforcement_count", "refined_at", "pinned", "archived_at", "archive_reason", "hub_since")


def _line(record: dict) -> str:
    return json.dumps(jsonable(record), ensure_ascii=False)


def _with_ref(item: object, refs: dict[str, str]) -> object:
    if isinstance(item, dict) and item.get("subject_id") in refs:
        return dict(item, subject_id=refs[item["subject_id"]])
    return item


def _read(records: Iterable[tuple[str, object]]) -> tuple[list[MemoryPair], list[dict], list[dict]]:
    """Split and check an export's records: pairs (validated as any pair), their dreams, and subjects."""
    pairs, dreams, subjects, refs = [], [], [], set()
    for n, (where, record) in enumerate(records):
        if n == 0:
            if not is_export(record):
                raise InvalidInputError("export", "the first line is not an export header", where)
            continue
        if not isinstance(record, dict):
            raise InvalidInputError("record", "must be an object", where)
        if "subject" in record:
            subject = record["subject"]
            if not isinstance(subject, dict) or not isinstance(subject.get("name"), str) or not subject.get("ref"):
                raise InvalidInputError("subject", "needs a name and a ref", where)
            subject = dict(subject, **{key: _timestamp(subject.get(key), key, where) for key in _TIMES})
            subjects.append(subject)
            refs.add(subject["ref"])
            continue
        dream = record.get("dream") or {}
        if not isinstance(dream, dict):
            raise InvalidInputError("dream", "must be an object", where)
        pairs.append(parse_pair({k: v for k, v in record.items() if k != "dream"}, where))
        dreams.append(dream)
    unknown = {ref for dream in dreams for ref in dream.get("subjects") or [] if ref not in refs}
    if unknown:
        raise InvalidInputError("dream.subjects", f"names subjects the file does not hold: {sorted(unknown)[:5]}")
    return pairs, dreams, subjects


_TIMES = ("created_at", "last_seen_at", "refined_at", "archived_at", "hub_since")


def _timestamp(value: object, name: str, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidInputError(f"subject.{name}", f"cannot parse timestamp {str(value)[:40]!r}", where) from None


def _time_range(t: dict) -> TimeRange:
    return TimeRange(first_day=date.fromisoformat(t["first_day"]),
                                      last_day=date.fromisoformat(t["last_day"]),
                                      granularity=t["granularity"], certainty=float(t["certainty"]))
