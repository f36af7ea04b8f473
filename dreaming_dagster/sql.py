"""Load SQL models from ``dbt_like_sql/`` by name (one statement or model a file).

``load_sql("memory_pairs/insert_pairs")`` reads ``dbt_like_sql/memory_pairs/insert_pairs.sql``. Files are
read once per process. A source checkout uses the top-level folder; a wheel carries a copy inside the
package (``dreaming_dagster/_dbt_like_sql``).

A model may mark optional sections, lines between ``-- begin section NAME`` and ``-- end section NAME``:
``load_sql_without(model, NAME)`` is the statement without them (one statement in one file, in two shapes,
where a smaller shape saves Postgres parsing and planning what a call never runs).
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


@cache
def load_sql_without(name: str, section: str) -> str:
    """The model ``name`` without the lines of its section ``section`` (markers included)."""
    begin, end = f"-- begin section {section}", f"-- end section {section}"
    kept, inside, found = [], False, 0
    for line in load_sql(name).splitlines(keepends=True):
        marker = line.strip().split(" (", 1)[0]  # a marker may say why in parentheses after its name
        if marker == begin:
            if inside:
                raise ValueError(f"SQL model {name!r}: section {section!r} begins again before it ends")
            inside, found = True, found + 1
        elif marker == end:
            if not inside:
                raise ValueError(f"SQL model {name!r}: section {section!r} ends before it begins")
            inside = False
        elif not inside:
            kept.append(line)
    if inside or not found:
        raise ValueError(f"SQL model {name!r}: section {section!r} is {'not closed' if inside else 'missing'}")
    return "".join(kept)
