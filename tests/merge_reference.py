"""The merge stage as it was before it became set-based: pair by pair, subject by subject, a statement or
three each (tests/sql/reference/). The set-based stage must decide exactly as this does."""

from psycopg.types.json import Jsonb

from dreaming_dagster.embeddings import subject_embedding_text
from dreaming_dagster.pipeline.batches import pending_batches
from dreaming_dagster.pipeline.merging import Candidate, append_description, choose_merge_target
from tests.conftest import reference_sql


def merge_one_at_a_time(database, embedder, user_id: str, kg_id: str, threshold: float, batch_size: int = 30):
    counts = {"pairs": 0, "created": 0, "merged": 0, "reused": 0}
    for pairs in pending_batches(database, "pipeline/pending_merge_batch",
                                 {"user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": []}):
        names = sorted({s["name"] for pair in pairs for s in (pair["extracted_subjects"] or [])})
        vectors = dict(zip(names, embedder.embed([subject_embedding_text(n) for n in names]), strict=True))
        with database.connect() as conn:
            for pair in pairs:
                with conn.transaction():
                    _merge_pair(conn, pair, vectors, user_id, kg_id, threshold, counts)
    return counts


def _merge_pair(conn, pair, vectors, user_id, kg_id, threshold, counts) -> None:
    subjects = list(pair["extracted_subjects"] or [])
    key = {"user_id": user_id, "kg_id": kg_id}
    reinforced: set[str] = set()
    for subject in subjects:
        known_id = subject.get("subject_id")
        if known_id and conn.execute(reference_sql("live_subject"), {"id": known_id, **key}).fetchone():
            counts["reused"] += 1
            continue
        embedding = vectors[subject["name"]]
        candidates = [Candidate(str(row["id"]), row["subject_text"], float(row["similarity"]))
                      for row in conn.execute(reference_sql("similar_subjects"),
                                              {"embedding": embedding, "threshold": threshold, **key})]
        target = choose_merge_target(candidates, threshold)
        if target is None:
            row = conn.execute(reference_sql("insert_subject"), {
                "subject_text": subject["name"], "description_text": subject.get("description", ""),
                "subject_type": subject.get("type", "other"), "embedding": embedding,
                "seen_at": pair["occurred_at"], **key}).fetchone()
            subject_id = str(row["id"])
            if row["inserted"]:
                counts["created"] += 1
            else:
                if subject_id not in reinforced:
                    _reinforce(conn, subject_id, row["description_text"], subject, pair, key)
                counts["merged"] += 1
        else:
            subject_id = target.subject_id
            if subject_id not in reinforced:
                existing = conn.execute(reference_sql("live_subject"), {"id": subject_id, **key}).fetchone()
                _reinforce(conn, subject_id, existing["description_text"], subject, pair, key)
            counts["merged"] += 1
        reinforced.add(subject_id)
        subject["subject_id"] = subject_id
    conn.execute(reference_sql("record_merge"), {"id": pair["id"], "user_id": user_id,
                                                      "extracted_subjects": Jsonb(subjects)})
    counts["pairs"] += 1


def _reinforce(conn, subject_id, description, subject, pair, key) -> None:
    conn.execute(reference_sql("merge_into_subject"), {
        "id": subject_id, "seen_at": pair["occurred_at"], **key,
        "description_text": append_description(description, subject.get("description", ""))})
