"""Figures the docs cite by key path, read and rewritten: ``[0.754](../bench/results/longmemeval.json#/a/b)``
shows the value at JSON Pointer ``/a/b`` (RFC 6901, in its URI form) of that result file. After a benchmark
runs again, `bench/report.py` rewrites each cited figure to the file's new value at the same precision; the
words around a figure are the writer's to check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

CITATION = re.compile(r"\[(?P<shown>[\d,]+(?:\.\d+)?%?)\]\((?P<file>(?:\.\./)?bench/results/[a-z0-9_]+\.json)"
                      r"#(?P<pointer>/[^)\s]*)\)")


def value_at(document, pointer: str):
    """The value at a JSON Pointer in its URI form (percent-encoded tokens, ~1 for "/" and ~0 for "~")."""
    for token in pointer.split("/")[1:]:
        key = unquote(token).replace("~1", "/").replace("~0", "~")
        document = document[int(key)] if isinstance(document, list) else document[key]
    return document


def _decimals(shown: str) -> int:
    number = shown.rstrip("%")
    return len(number.split(".")[1]) if "." in number else 0


def shows(shown: str, value: float) -> bool:
    """Whether ``shown`` is ``value`` as the docs round it: as written, or a share written in % (0.975 → 97.5%)."""
    number, decimals = float(shown.rstrip("%").replace(",", "")), _decimals(shown)
    candidates = (value, value * 100) if shown.endswith("%") else (value,)
    return any(abs(round(candidate, decimals) - number) < 10 ** -(decimals + 3) for candidate in candidates)


def written_like(shown: str, value: float) -> str:
    """``value`` written as ``shown`` is: its decimals, thousands separators, and a share in % where the old
    figure was a share."""
    decimals = _decimals(shown)
    if shown.endswith("%"):
        old = float(shown.rstrip("%").replace(",", ""))
        share = abs(value * 100 - old) <= abs(value - old)  # 0.975 shown as 97.5%, or a value already in %
        value = value * 100 if share else value
    text = f"{value:,.{decimals}f}" if "," in shown else f"{value:.{decimals}f}"
    return text + ("%" if shown.endswith("%") else "")


def refreshed(page: str, page_path: Path) -> tuple[str, int]:
    """``page`` with every cited figure rewritten to the value its file now holds; and how many changed."""
    changed = 0
    documents: dict[Path, object] = {}

    def rewrite(citation: re.Match) -> str:
        nonlocal changed
        target = (page_path.parent / citation["file"]).resolve()
        if target not in documents:
            documents[target] = json.loads(target.read_text())
        value = value_at(documents[target], citation["pointer"])
        if isinstance(value, bool) or not isinstance(value, int | float) or shows(citation["shown"], value):
            return citation[0]
        changed += 1
        return f"[{written_like(citation['shown'], value)}]({citation['file']}#{citation['pointer']})"

    return CITATION.sub(rewrite, page), changed
