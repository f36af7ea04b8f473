"""The package's SQL, one statement a file, loaded by name.

``queries/`` holds what the package runs, a folder for each domain that runs it:
``load_sql("memory_pairs/insert_pairs")`` reads ``queries/memory_pairs/insert_pairs.sql``. ``migrations/``
holds the schema's migrations, applied in order (``storage/migrations.py``). The benches and tests keep their
own SQL beside them (``bench/sql``, ``tests/sql``) and read it with :func:`read_statement`. Files are read once
a process.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent
QUERIES_DIR = SQL_DIR / "queries"
MIGRATIONS_DIR = SQL_DIR / "migrations"


@cache
def read_statement(root: Path, name: str) -> str:
    """The text of ``root/name.sql``; ``name`` is a relative path without ``.sql``."""
    if name.endswith(".sql") or ".." in Path(name).parts:
        raise ValueError(f"SQL names are relative paths without .sql, got {name!r}")
    path = root / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"SQL {name!r} not found at {path}")
    return path.read_text(encoding="utf-8")


def load_sql(name: str) -> str:
    """The package query ``name`` (a path under ``queries/``, without ``.sql``)."""
    return read_statement(QUERIES_DIR, name)


def migration_files() -> list[Path]:
    """The ordered migration files (``migrations/NNNN_name.sql``)."""
    return sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
