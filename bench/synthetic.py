"""Synthetic memories at scale for benchmarks and tests: users with many pairs, subjects and links,
bulk-loaded with COPY, whose vectors have the geometry of real sentence embeddings (topics that share
structure, a low intrinsic dimension) rather than of random noise. bench/recall.py measures recall on
them; tests check the HNSW pool and its exact fallback on them."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
from common import bench_sql

DIMENSION = 384
START = datetime(2023, 1, 1, tzinfo=UTC)
KEYS_PER_PAIR = 1.36  # index keys a pair, on average, as on the oracle memory (longmemeval.json: keys.oracle)
PAIR_TYPES = ["uuid", "text", "text", "text", "int4", "text", "text", "timestamptz", "int4", "text", "vector",
              "vector"]


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def topic_weights(clusters: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, clusters + 1) ** 0.8  # a few topics dominate, as in real chat history
    return weights / weights.sum()


def topic_centres(rng, clusters: int) -> np.ndarray:
    """Topic centres with the geometry of real sentence embeddings rather than of random vectors: a
    component every text shares, one of 20 broad themes, and the topic's own direction (cosine between
    unrelated topics ~0.25, between topics of one theme ~0.55). Purely random centres would be mutually
    orthogonal, a worst case for HNSW that real embeddings never present. The shared component and the
    themes are fixed, so every user lives in the same space."""
    space = np.random.default_rng(1234)
    shared = unit(space.normal(size=(1, DIMENSION)))
    themes = unit(space.normal(size=(20, DIMENSION)))
    own = unit(rng.normal(size=(clusters, DIMENSION)))
    theme_of = rng.integers(0, len(themes), size=clusters)
    return unit(np.sqrt(0.25) * shared + np.sqrt(0.30) * themes[theme_of] + np.sqrt(0.45) * own)


def around(rng, centres: np.ndarray, spread: float) -> np.ndarray:
    """Unit vectors near ``centres`` (one per row). The variation lies mostly in a fixed 48-d subspace,
    plus a little isotropic noise: real sentence embeddings have a low intrinsic dimension, and isotropic
    384-d noise (the other choice) is a worst case no embedding model produces. ``spread`` 1.0 gives a
    cosine of ~0.65 to the centre."""
    basis = unit(np.random.default_rng(4321).normal(size=(48, DIMENSION)))
    low_rank = rng.normal(size=(len(centres), 48)) @ basis * (1.1 / np.sqrt(48))
    isotropic = rng.normal(size=(len(centres), DIMENSION)) * (0.4 / np.sqrt(DIMENSION))
    return unit(centres + spread * (low_rank + isotropic))


def load_user(conn, rng, user_id: str, pairs: int, subjects: int, clusters: int, days: int, progress,
              texts: list[tuple[str, str]] | None = None) -> np.ndarray:
    """Bulk-load one user's pairs, subjects and links; return the topic centres (for queries). With
    ``texts``, each pair's messages are one of them drawn at random."""
    centres = topic_centres(rng, clusters)
    weights = topic_weights(clusters)
    pair_topic = rng.choice(clusters, size=pairs, p=weights)
    occurred_seconds = np.sort(rng.uniform(0, days * 86400, size=pairs))
    pair_ids = [uuid.UUID(bytes=rng.bytes(16), version=4) for _ in range(pairs)]
    now = datetime.now(UTC)
    with conn.cursor() as cursor, cursor.copy(bench_sql("copy_pairs")) as copy:
        copy.set_types(PAIR_TYPES)
        for start in range(0, pairs, 5000):
            stop = min(start + 5000, pairs)
            vectors = around(rng, centres[pair_topic[start:stop]], 1.0)
            # The reply's vector: same topic, its own draw (two turns of one exchange).
            replies = around(rng, centres[pair_topic[start:stop]], 1.0)
            for offset, (vector, reply_vector) in enumerate(zip(vectors, replies, strict=True)):
                i = start + offset
                user_message, reply = (texts[int(rng.integers(len(texts)))] if texts
                                       else (f"synthetic user message {i}", "synthetic reply"))
                copy.write_row([pair_ids[i], user_id, "default", f"{user_id}-s{i // 20}", i % 20,
                                user_message, reply,
                                START + timedelta(seconds=float(occurred_seconds[i])), 12,
                                hashlib.md5(f"{user_id}:{i}".encode()).hexdigest(), vector, reply_vector])
            progress.update(stop - start)
    conn.execute(bench_sql("mark_user_dreamed"), {"user_id": user_id})
    # Index keys as the keying stage writes them: a Poisson number a pair (KEYS_PER_PAIR on average, as on
    # the LongMemEval oracle memory), each a sentence of the pair's topic.
    key_counts = np.minimum(rng.poisson(KEYS_PER_PAIR, size=pairs), 8)
    key_vectors = around(rng, centres[np.repeat(pair_topic, key_counts)], 1.0)
    with conn.cursor() as cursor, cursor.copy(bench_sql("copy_keys")) as copy:
        copy.set_types(["uuid", "text", "text", "text", "int4", "text", "vector"])
        row = 0
        for i in range(pairs):
            for position in range(int(key_counts[i])):
                copy.write_row([pair_ids[i], user_id, "default", "statement", position, f"key {i}.{position}",
                                key_vectors[row]])
                row += 1
    subject_topic = rng.choice(clusters, size=subjects, p=weights)
    subject_ids = [uuid.UUID(bytes=rng.bytes(16), version=4) for _ in range(subjects)]
    subject_vectors = around(rng, centres[subject_topic], 0.8)
    with conn.cursor() as cursor, cursor.copy(bench_sql("copy_subjects")) as copy:
        copy.set_types(["uuid", "text", "text", "text", "text", "text", "vector", "timestamptz", "timestamptz"])
        for j in range(subjects):
            copy.write_row([subject_ids[j], user_id, "default", f"{user_id} subject {j}", "", "other",
                            subject_vectors[j], START, now])
    by_topic: dict[int, list[int]] = {}
    for j, topic in enumerate(subject_topic):
        by_topic.setdefault(int(topic), []).append(j)
    links = 0
    with conn.cursor() as cursor, cursor.copy(bench_sql("copy_links")) as copy:
        copy.set_types(["uuid", "uuid", "text", "text"])
        for i in range(pairs):
            members = by_topic.get(int(pair_topic[i]))
            if not members:
                continue
            # Zipf inside a topic: its first subjects become hubs linked to many pairs.
            hub_weights = 1.0 / np.arange(1, len(members) + 1) ** 1.1
            count = min(len(members), int(rng.integers(1, 4)))
            for j in rng.choice(members, size=count, replace=False, p=hub_weights / hub_weights.sum()):
                copy.write_row([subject_ids[j], pair_ids[i], user_id, "default"])
                links += 1
    return centres


def queries_around(rng, centres: np.ndarray, n: int) -> np.ndarray:
    topics = rng.choice(len(centres), size=n, p=topic_weights(len(centres)))
    return around(rng, centres[topics], 1.1)
