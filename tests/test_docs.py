"""The docs speak to users about the product as it is: every setting documented, no development history,
pages that stay short, and figures that point at committed result files."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from dreaming_dagster.config.settings import DreamingSettings
from tests.bench_smoke import bench_module
from tests.conftest import PROJECT_ROOT

citations = bench_module("citations")  # the citation syntax, shared with bench/report.py that rewrites it

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
    for root in (DOCS, PROJECT_ROOT / "dreaming_dagster", PROJECT_ROOT / "bench", PROJECT_ROOT / "tests" / "sql"):
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
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})*\.\d+|\d+\.\d+|\d+(?:\.\d+)?(?=%)|(?<=×)\d+(?:\.\d+)?)(?!\w|\.\d)")
CODE_SPAN = re.compile(r"`[^`]*`")
BENCH_COMMAND = re.compile(r"make bench-([a-z][a-z-]*[a-z])")  # `make bench-recall` writes recall.json


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


def test_every_cited_figure_is_the_value_at_its_key_path():
    wrong = []
    for path in _pages():
        for citation in citations.CITATION.finditer(path.read_text()):
            target = (path.parent / citation["file"]).resolve()
            where = f"{path.name}: {citation['shown']} ({target.name}#{unquote(citation['pointer'])})"
            try:
                value = citations.value_at(json.loads(target.read_text()), citation["pointer"])
            except (OSError, KeyError, IndexError, ValueError, TypeError):
                wrong.append(f"{where}: no such file or key")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not citations.shows(citation["shown"], value):
                wrong.append(f"{where}: the file holds {value!r}")
    assert wrong == []


def test_every_figure_beside_a_result_file_is_cited_by_its_key_path():
    """A paragraph or table row that names a result file, or the benchmark that writes one, cites each of its
    measured figures by key path (figures in code spans are settings or examples, not measurements)."""
    uncited = []
    for path in _pages():
        for unit in _units(path.read_text()):
            named = RESULT_FILE.findall(unit) + [name.replace("-", "_") for name in BENCH_COMMAND.findall(unit)]
            if not any((RESULTS / f"{name}.json").is_file() for name in named):
                continue
            bare = CODE_SPAN.sub(" ", citations.CITATION.sub(" ", unit))
            uncited += [f"{path.name}: {figure} in {unit[:80]!r}" for figure in FIGURE.findall(bare)]
    assert uncited == []


def test_a_headline_figure_appears_elsewhere_only_with_its_result_file():
    performance = (DOCS / "performance.md").read_text()
    generated = performance[performance.index("<!-- the tables below"):performance.index("<!-- end of the tables")]
    headline = {figure for row in generated.splitlines() if row.startswith("| ") and "`make bench" in row
                for figure in FIGURE.findall(row.split(" | ")[2]) if "." in figure}
    repeated = [f"{path.name}: {figure} in {unit[:80]!r}" for path in _pages() for unit in _units(path.read_text())
                if not RESULT_FILE.search(unit) for figure in FIGURE.findall(unit) if figure in headline]
    assert repeated == []


def test_cited_figures_are_rewritten_to_their_files_values_at_the_same_precision(tmp_path):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "quality.json").write_text(json.dumps({"a b": {"recall@10": 0.7541, "pool": 0.975, "pairs": 23456,
                                                              "same": 0.5}}))
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    link = "../bench/results/quality.json#/a%20b"
    text = (f"Recall [0.700]({link}/recall@10), pool [95.0%]({link}/pool), [12,345]({link}/pairs) pairs, "
            f"unchanged [0.50]({link}/same).")
    rewritten, changed = citations.refreshed(text, page)
    assert changed == 3
    assert rewritten == (f"Recall [0.754]({link}/recall@10), pool [97.5%]({link}/pool), [23,456]({link}/pairs) "
                         f"pairs, unchanged [0.50]({link}/same).")
    assert citations.refreshed(rewritten, page) == (rewritten, 0)
