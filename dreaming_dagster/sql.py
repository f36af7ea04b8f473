"""Load SQL models from ``dbt_like_sql/`` by name (one statement or model a file).

``load_sql("memory_pairs/insert_pairs")`` reads ``dbt_like_sql/memory_pairs/insert_pairs.sql``. Files are
read once per process. A source checkout uses the top-level folder; a wheel carries a copy inside the
package (``dreaming_dagster/_dbt_like_sql``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_CANDIDATE_ROOTS = (_PACKAGE_DIR.parent / "dbt_like_sql", _PACKAGE_DIR / "_dbt_like_sql")


@cache
def sql_root() -> Path:
    for root in _CANDIDATE_ROOTS:
        if root.is_dir():
            return root
    raise FileNotFoundError(f"no dbt_like_sql folder found (looked in {', '.join(map(str, _CANDIDATE_ROOTS))})")


@cache
def load_sql(name: str) -> str:
    """Return the text of the SQL model ``name`` (a path under dbt_like_sql/, without ``.sql``)."""
    if name.endswith(".sql") or ".." in Path(name).parts:
        raise ValueError(f"SQL model names are relative paths without .sql, got {name!r}")
    path = sql_root() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"SQL model {name!r} not found at {path}")
    return path.read_text(encoding="utf-8")


def migration_files() -> list[Path]:
    """The ordered migration files (``dbt_like_sql/migrations/NNNN_name.sql``)."""
    return sorted((sql_root() / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))
