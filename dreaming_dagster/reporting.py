"""Human-readable summaries (markdown for Dagster metadata, rich tables for the shell)."""

from __future__ import annotations

from collections.abc import Sequence


def _day(value) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def user_stats_markdown(user_id: str, stats: Sequence[dict]) -> str:
    if not stats:
        return f"User `{user_id}` has no memory pairs yet."
    lines = [
        f"### Memory of `{user_id}`",
        "",
        "| knowledge graph | pairs | tokens | sessions | pending embedding | pending extraction | span |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in stats:
        lines.append(
            f"| {row['kg_id']} | {row['pairs']:,} | {row['tokens']:,} | {row['sessions']:,} | "
            f"{row['pending_embedding']:,} | {row['pending_extraction']:,} | "
            f"{_day(row['first_occurred_at'])} → {_day(row['last_occurred_at'])} |"
        )
    return "\n".join(lines)


def top_subjects_markdown(user_id: str, rows: Sequence[dict]) -> str:
    if not rows:
        return f"User `{user_id}` has no subjects yet."
    lines = [f"### Top subjects of `{user_id}` by linked pairs", "",
             "| subject | type | linked pairs | reinforced | refined |", "|---|---|---:|---:|---|"]
    for row in rows:
        name = str(row["subject_text"]).replace("|", "\\|")
        lines.append(f"| {name} | {row['subject_type']} | {row['linked_pairs']} | "
                     f"{row['reinforcement_count']} | {'yes' if row['refined'] else ''} |")
    return "\n".join(lines)
