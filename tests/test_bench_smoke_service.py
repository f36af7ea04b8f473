"""The service-faults bench's smoke run (tests/bench_smoke.py): a flood of wrong keys against a real
`dreaming serve`. Most of its time is waiting for Postgres to report the backends' transactions, so it runs
first, beside the browser test's set-up, rather than with the other smoke runs."""

from __future__ import annotations

import pytest

from tests.bench_smoke import run_bench

pytestmark = pytest.mark.slow  # runs the service benchmarks


def test_wrong_keys_are_throttled_before_the_database(tmp_path):
    # The kill -9 and SIGTERM scenarios are tests/test_service_hardening.py's, with more checked: run once each.
    result = run_bench("service_faults", "--scenarios", "wrong-keys", "--wrong-keys", "50", out=tmp_path / "r.json")
    assert result["kill_mid_sync"] is None and result["sigterm_past_grace"] is None
    flood = result["wrong_keys"]
    assert flood["answered_429_after_burst"] == flood["after_burst"] == 45 and flood["database_transactions"] <= 20
