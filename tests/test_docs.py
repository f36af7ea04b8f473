"""The docs speak to users about the product as it is: every setting documented, no development history,
pages that stay short, and figures that point at committed result files."""

from __future__ import annotations

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
