"""Human-readable summaries (markdown for Dagster metadata, rich tables for the shell)."""

from __future__ import annotations

from collections.abc import Sequence

TABLE_MIN_WEIGHT = 0.05  # recall_table shows the signals weighted at least this much


def _day(value) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def user_stats_markdown(user_id: str, stats: Sequence[dict]) -> str:
    if not stats:
        return f"User `{user_id}` has no memory pairs yet."
    lines = [
        f"### Memory of `{user_id}`",
        "",
        "| knowledge graph | pairs | tokens | sessions | pairs with dated events | pending embedding "
        "| pending extraction | failed extraction | span |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in stats:
        lines.append(
            f"| {row['kg_id']} | {row['pairs']:,} | {row['tokens']:,} | {row['sessions']:,} | "
            f"{row['dated_pairs']:,} | {row['pending_embedding']:,} | {row['pending_extraction']:,} | {row['failed_extraction']:,} | "
            f"{_day(row['first_occurred_at'])} → {_day(row['last_occurred_at'])} |"
        )
    return "\n".join(lines)


def top_subjects_markdown(user_id: str, rows: Sequence[dict]) -> str:
    if not rows:
        return f"User `{user_id}` has no subjects yet."
    lines = [f"### Top subjects of `{user_id}` by linked pairs", "",
             "| subject | type | linked pairs | reinforced | refined | hub |", "|---|---|---:|---:|---|---|"]
    for row in rows:
        name = str(row["subject_text"]).replace("|", "\\|")
        lines.append(f"| {name} | {row['subject_type']} | {row['linked_pairs']} | "
                     f"{row['reinforcement_count']} | {'yes' if row['refined'] else ''} | "
                     f"{'yes' if row.get('hub') else ''} |")
    return "\n".join(lines)


def graph_report_markdown(user_id: str, reports: Sequence[dict]) -> str:
    """pipeline/graph_reports.graph_report as a table: one row per knowledge graph."""
    if not reports:
        return f"User `{user_id}` has no memory pairs."
    lines = [f"### The graph of `{user_id}`", "",
             "| kg | pairs | subjects | links | singletons | median subjects/pair | largest subject | hubs | "
             "generic |", "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in reports:
        largest = (f"{r['largest_subject']} ({100 * r['largest_share']:.1f}%{', hub' if r['largest_is_hub'] else ''})"
                   if r["largest_subject"] else "–").replace("|", "\\|")
        lines.append(f"| {r['kg_id']} | {r['pairs']:,} | {r['subjects']:,} | {r['links']:,} | "
                     f"{100 * r['singleton_share']:.0f}% | {r['median_subjects_per_pair']} | {largest} | "
                     f"{r['hubs']} | {100 * r['generic_share']:.1f}% |")
    return "\n".join(lines)


def _snippet(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def time_understood(time) -> str:
    """What recall understood of a question's time, in words: "time: last month → 1–30 April 2023"."""
    parts = []
    if time.window is not None:
        parts.append(f"time: {time.expression} → {time.as_dict()['label']}")
    if time.order:
        parts.append(f"order: {time.order}")
    if time.sides:
        parts.append("sides: " + " | ".join(time.sides))
    return " · ".join(parts)


def recall_table(result):
    """A rich table of a :class:`~dreaming_dagster.retrieval.recaller.RecallResult`: one row per memory
    with its score and the signals that carry weight in this ranking (``--json`` has all twelve); the time
    the question asks about in the title; the weights and the model in the caption."""
    from rich.table import Table

    weights = result.weights.as_dict()
    # Twelve numbers leave no room for the memory in a terminal: the signals weighted at least
    # TABLE_MIN_WEIGHT, heaviest first (cos alone for a ranking without a model).
    shown = sorted((n for n, w in weights.items() if w >= TABLE_MIN_WEIGHT), key=lambda n: -weights[n]) or ["cos"]
    caption_weights = " · ".join(f"{name} {value:.2f}" for name, value in weights.items() if value)
    table = Table(expand=True, title=f"recall for {result.user_id}: {_snippet(result.query, 60)}"
                  + (f"\n{time_understood(result.time)}" if result.time.as_dict() else ""),
                  caption=f"model {result.weights.model} · weights {caption_weights} · scale {result.weights.scale:.2f}"
                          + (f" · question type {result.question_type}" if result.question_type else "")
                          + " · " + " ".join(f"{k} {v:.1f} ms" for k, v in result.timings_ms.items()))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    for name in shown:
        header = {"neighbor_density": "nbr\ndensity", "key_match": "key"}.get(name, name.replace("_", "\n"))
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("session", no_wrap=True, max_width=10)
    table.add_column("when", no_wrap=True)
    table.add_column("memory", no_wrap=True, overflow="ellipsis", ratio=1)
    for rank, memory in enumerate(result.memories, 1):
        table.add_row(str(rank), f"{memory.score:.3f}", *(f"{memory.signals[n]:.2f}" for n in shown),
                      _snippet(memory.session_id, 12), memory.occurred_at.strftime("%Y-%m-%d"),
                      _snippet(f"{memory.user_message} → {memory.assistant_message}", 80))
    return table
