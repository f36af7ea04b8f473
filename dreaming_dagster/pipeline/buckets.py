"""Hash buckets of users: how Dagster partitions a deployment past a few thousand users.

Dagster keeps one row a dynamic partition and lists them all in its UI and sensors; one partition a user
stops working near 10^5 users. Past a configured size a deployment switches (``dreaming dagster partitioning
--buckets N``) to a fixed number of buckets: a user's bucket is ``md5(user_id)`` modulo N (the SQL function
``user_bucket`` computes the same), and a bucket partition's run dreams the users of that bucket with work.
The choice is kept in the memory database (``dagster_layout``), where every Dagster process reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import psycopg

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

BUCKET_PREFIX = "bucket-"
MAX_BUCKETS = 10_000  # the migration's check: a bucket partition set stays far under Dagster's limits


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket of ``user_id`` among ``buckets``: the first 32 bits of its md5, modulo the count."""
    return int(hashlib.md5(user_id.encode("utf-8")).hexdigest()[:8], 16) % buckets


def bucket_key(index: int, buckets: int) -> str:
    """The partition key of bucket ``index``: zero-padded so the keys sort in bucket order."""
    return f"{BUCKET_PREFIX}{index:0{len(str(buckets - 1))}d}"


def bucket_key_of(user_id: str, buckets: int) -> str:
    """The partition key of the bucket ``user_id`` falls in."""
    return bucket_key(bucket_of(user_id, buckets), buckets)


def describe_layout(buckets: int) -> str:
    return f"{buckets} hash buckets of users" if buckets else "one partition a user"


def bucket_keys(buckets: int) -> list[str]:
    return [bucket_key(index, buckets) for index in range(buckets)]


def bucket_index(key: str) -> int:
    """The bucket number of a partition key made by :func:`bucket_key`."""
    if not key.startswith(BUCKET_PREFIX) or not key[len(BUCKET_PREFIX):].isdigit():
        raise ValueError(f"partition key {key!r} is not a bucket ({BUCKET_PREFIX}N)")
    return int(key[len(BUCKET_PREFIX):])


def group_by_bucket(user_ids: Iterable[str], buckets: int) -> dict[str, list[str]]:
    """``user_ids`` by the key of their bucket."""
    grouped: dict[str, list[str]] = {}
    for user_id in user_ids:
        grouped.setdefault(bucket_key_of(user_id, buckets), []).append(user_id)
    return grouped


def read_layout(database: Database) -> int:
    """The deployment's bucket count; 0 is one partition a user (also before the schema exists)."""
    try:
        with database.connect(vectors=False) as conn:
            row = conn.execute(load_sql("dagster/layout")).fetchone()
    except psycopg.errors.UndefinedTable:
        return 0
    return row["buckets"] if row else 0


def write_layout(database: Database, buckets: int) -> None:
    """Record the deployment's partitioning: ``buckets`` hash buckets, or 0 for one partition a user."""
    if not 0 <= buckets <= MAX_BUCKETS:
        raise ValueError(f"buckets must be between 0 (one partition a user) and {MAX_BUCKETS:,}, got {buckets}")
    with database.connect(vectors=False) as conn:
        conn.execute(load_sql("dagster/set_layout" if buckets else "dagster/clear_layout"), {"buckets": buckets})
