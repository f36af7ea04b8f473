"""`make demo`'s job, small: LongMemEval users ingested and dreamed through Dagster with the project's
dagster.yaml (Postgres run storage, queued coordinator), on a real database and the real local model."""

import dagster as dg
import pytest
from rich.console import Console

from dreaming_dagster.demo import build_demo_users, run_demo
from tests.conftest import ORACLE

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present")


def test_demo_users_get_different_slices_in_date_order():
    users = build_demo_users(ORACLE, users=3, questions_per_user=4)
    assert [u.user_id for u in users] == ["demo-user-1", "demo-user-2", "demo-user-3"]
    question_sets = [set(u.question_ids) for u in users]
    assert all(len(s) == 4 for s in question_sets)
    assert not (question_sets[0] & question_sets[1]) and not (question_sets[1] & question_sets[2])
    for user in users:
        times = [r["occurred_at"] for r in user.records]
        assert times == sorted(times) and times


def test_demo_runs_through_dagster(clean_env, database_url, tmp_path):
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    # Registered with monkeypatch so the variables run_demo exports are restored afterwards
    # (an empty storage URL means "derive it from DREAMING_DATABASE_URL").
    clean_env.setenv("DAGSTER_HOME", str(tmp_path))
    clean_env.setenv("DREAMING_DAGSTER_STORAGE_URL", "")
    with (tmp_path / "out.txt").open("w") as output:
        totals = run_demo(users=2, questions_per_user=1, console=Console(file=output, width=120))
    assert "demo-user-2" in (tmp_path / "out.txt").read_text()
    assert totals["users"] == 2 and totals["pairs"] > 0 and totals["tokens"] > 0
    assert totals["pending_embedding"] == 0
    with dg.DagsterInstance.get() as instance:  # the project's dagster.yaml, storage in Postgres
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        runs = instance.get_runs(dg.RunsFilter(job_name="dreaming_job"))
        assert sorted(run.tags["dagster/partition"] for run in runs) == ["demo-user-1", "demo-user-2"]
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        assert set(instance.get_dynamic_partitions("users")) == {"demo-user-1", "demo-user-2"}
