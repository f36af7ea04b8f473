"""API keys: each bound to one tenant (a ``kg_id``), stored as a SHA-256 of the secret, revocable.

A secret is ``dd_`` + 32 random bytes (URL-safe base64): shown once at creation, never stored or logged.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec
from dreaming_dagster.storage.records import validate_new_identifier

SECRET_PREFIX = "dd_"
SHOWN_PREFIX_CHARS = 10  # "dd_" and 7 characters of the secret: enough to tell keys apart in a list


@dataclass(frozen=True)
class ApiKey:
    id: str
    kg_id: str
    name: str


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(database: Database, spec: EmbeddingSpec, kg_id: str, name: str = "") -> tuple[str, dict]:
    """A new key for tenant ``kg_id``: (the secret, shown once; the stored row)."""
    kg_id = validate_new_identifier(kg_id, "kg_id")
    if len(name) > 200:
        raise ValueError("name: at most 200 characters")
    database.ensure_schema(spec)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    with database.connect() as conn:
        row = conn.execute(load_sql("service/create_key"), {
            "kg_id": kg_id, "name": name, "prefix": secret[:SHOWN_PREFIX_CHARS],
            "secret_hash": secret_hash(secret)}).fetchone()
    return secret, row


def list_keys(database: Database, spec: EmbeddingSpec) -> list[dict]:
    database.ensure_schema(spec)
    with database.connect() as conn:
        return conn.execute(load_sql("service/list_keys")).fetchall()


def revoke_key(database: Database, spec: EmbeddingSpec, key_id: str) -> dict | None:
    """Revoke the key with this id; None when there is none."""
    database.ensure_schema(spec)
    with database.connect() as conn:
        return conn.execute(load_sql("service/revoke_key"), {"key_id": key_id}).fetchone()


def key_for_secret(database: Database, secret: str) -> ApiKey | None:
    """The live key a presented secret belongs to, or None (unknown, malformed or revoked)."""
    if not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
        return None
    with database.connect() as conn:
        row = conn.execute(load_sql("service/key_for_secret"), {"secret_hash": secret_hash(secret)}).fetchone()
    return ApiKey(id=row["id"], kg_id=row["kg_id"], name=row["name"]) if row else None
