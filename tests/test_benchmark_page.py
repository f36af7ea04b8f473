"""docs/benchmarks.md and the tables of docs/performance.md are bench/report.py's rendering of the committed
results (bench/results/*.json)."""

from __future__ import annotations

import importlib.util
import re
import sys

from tests.conftest import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"


def test_the_committed_benchmark_page_is_generated_from_the_committed_results():
    # A result re-measured without regenerating the page, or a layout row left with an unformatted
    # placeholder (a label's were not formatted until this test), fails here.
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # report.py imports the benches' shared module as `common`
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    page = report.render()
    assert re.search(r"\{[a-z_]+[\[}:]", page) is None
    assert page == (PROJECT_ROOT / "docs" / "benchmarks.md").read_text()
    performance = (PROJECT_ROOT / "docs" / "performance.md").read_text()
    assert report.render_performance(performance) == performance
