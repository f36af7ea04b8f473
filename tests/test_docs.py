"""The docs speak to users about the product as it is: every setting documented, no development history,
pages that stay short, and figures that point at committed result files."""

from __future__ import annotations

import json
import re

from dreaming_dagster.config.settings import DreamingSettings
from tests.conftest import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
HISTORY = re.compile(r"stops? [0-9]+|(slow|fast|normal) (hour|morning|afternoon)|the (run|session) before|"
                     r"(?<!from )scratch|speed probe", re.IGNORECASE)


def test_configuration_lists_every_setting_and_no_other():
    page = (DOCS / "configuration.md").read_text()
    declared = {f"DREAMING_{name.upper()}" for name in DreamingSettings.model_fields}
    named = set(re.findall(r"DREAMING_[A-Z_]*[A-Z]", page)) - {"DREAMING_EMBEDDING", "DREAMING_LLM"}
    assert declared - named == set() and named - declared == set()


def test_no_development_history_in_docs_code_or_benchmarks():
    files = [PROJECT_ROOT / "README.md"]
    for root in (DOCS, PROJECT_ROOT / "dreaming_dagster", PROJECT_ROOT / "bench", PROJECT_ROOT / "dbt_like_sql"):
        files += [path for path in root.rglob("*") if path.suffix in {".md", ".py", ".toml", ".json", ".sql"}
                  and "migrations" not in path.parts]  # applied migrations keep their text
    hits = [f"{path.relative_to(PROJECT_ROOT)}:{number}" for path in files
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if HISTORY.search(line)]
    assert hits == []


def test_the_performance_and_limits_pages_stay_short_and_cite_committed_results():
    performance = (DOCS / "performance.md").read_text()
    assert len(performance.splitlines()) <= 150 and len((DOCS / "known-limits.md").read_text().splitlines()) <= 60
    cited = set(re.findall(r"`([a-z_]+\.json)`", performance))
    assert cited and all((PROJECT_ROOT / "bench" / "results" / name).is_file() for name in cited)


RESULTS = PROJECT_ROOT / "bench" / "results"
RESULT_FILE = re.compile(r"\b([a-z][a-z0-9_]*)\.json\b")
# A measured figure as the docs write one: a decimal number, a percentage or a ratio (×1.26).
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})*\.\d+|\d+\.\d+|\d+(?:\.\d+)?(?=%)|(?<=×)\d+(?:\.\d+)?)(?![\w.])")


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


def _in_results(figure: str, values: list[float]) -> bool:
    """Whether ``figure`` is one of ``values`` as the docs round it (as a share in %, or as a ratio's inverse)."""
    number = float(figure.replace(",", ""))
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    for value in values:
        for shown in (value, value * 100, 1 / value if value else None):
            if shown is not None and abs(round(shown, decimals) - number) < 10 ** -(decimals + 3):
                return True
    return False


def _units(page: str) -> list[str]:
    """A page's table rows and prose paragraphs (the generated tables of performance.md left out: a test of
    their own holds them to the results)."""
    page = re.sub(r"<!-- the tables below are made by bench/report.py.*?<!-- end of the tables made by bench/report.py -->",
                  "", page, flags=re.DOTALL)
    page = re.sub(r"```.*?```", "", page, flags=re.DOTALL)
    units, before = [], ""
    for block in re.split(r"\n\s*\n", page):
        if block.lstrip().startswith("|"):
            # A table cites the result files its rows or the paragraph just above it name.
            cited = " ".join(f"{name}.json" for name in RESULT_FILE.findall(before + block))
            units += [f"{row} {cited}" for row in block.splitlines()]
        else:
            units += [" ".join(block.split())]
            before = block
    return units


def _pages():
    return [PROJECT_ROOT / "README.md", *sorted(path for path in DOCS.glob("*.md") if path.name != "benchmarks.md")]


def test_every_figure_cited_beside_a_result_file_is_in_that_file():
    wrong = []
    for path in _pages():
        for unit in _units(path.read_text()):
            files = [name for name in RESULT_FILE.findall(unit) if (RESULTS / f"{name}.json").is_file()]
            if not files:
                continue
            values = [n for name in files for n in _numbers(json.loads((RESULTS / f"{name}.json").read_text()))]
            wrong += [f"{path.name}: {figure} ({', '.join(files)})" for figure in FIGURE.findall(unit)
                      if not _in_results(figure, values)]
    assert wrong == []


def test_a_headline_figure_appears_elsewhere_only_with_its_result_file():
    performance = (DOCS / "performance.md").read_text()
    generated = performance[performance.index("<!-- the tables below"):performance.index("<!-- end of the tables")]
    headline = {figure for row in generated.splitlines() if row.startswith("| ") and "`make bench" in row
                for figure in FIGURE.findall(row.split(" | ")[2]) if "." in figure}
    repeated = [f"{path.name}: {figure} in {unit[:80]!r}" for path in _pages() for unit in _units(path.read_text())
                if not RESULT_FILE.search(unit) for figure in FIGURE.findall(unit) if figure in headline]
    assert repeated == []
