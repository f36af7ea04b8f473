"""Dagster's own storage as the project's dagster.yaml configures it (instance/storage.py): the same
dagster-postgres tables, a process keeping its connections instead of opening one a statement."""

from __future__ import annotations

import dagster as dg
import psycopg
import pytest
import yaml

from dreaming_dagster.dagster_env import STORAGE_URL_VARIABLE
from dreaming_dagster.instance.storage import PooledPostgresStorage
from dreaming_dagster.storage import embedded
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow  # Dagster instances and runs on Postgres


@dg.asset
def counted() -> int:
    return 1


def sessions_opened(admin_url: str, name: str) -> int:
    """Connections ever opened to database ``name`` (Postgres' own count), read from a new connection."""
    with psycopg.connect(admin_url) as conn:
        return conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()[0]


def materialized_three_times(config_dir, admin_url: str, name: str) -> tuple[int, int]:
    """Three runs materializing an asset through the instance of ``config_dir``: the connections they opened
    and the events they stored."""
    with dg.DagsterInstance.from_config(str(config_dir)) as instance:
        before = sessions_opened(admin_url, name)
        results = [dg.materialize([counted], instance=instance) for _ in range(3)]
        assert all(result.success for result in results)
        opened = sessions_opened(admin_url, name) - before
        events = sum(len(instance.all_logs(result.run_id)) for result in results)
        assert instance.get_latest_materialization_event(counted.key) is not None
    return opened, events


def test_the_projects_storage_keeps_its_connections_where_dagster_postgres_opens_one_a_statement(
        pg_admin_url, tmp_path, monkeypatch):
    url = embedded.fresh_database_url(pg_admin_url, "dagster")
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    monkeypatch.setenv(STORAGE_URL_VARIABLE, url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with dg.DagsterInstance.from_config(str(PROJECT_ROOT)) as instance:
        storage_class = instance.get_ref().storage_data  # what a run worker rebuilds its instance from
        assert (storage_class.module_name, storage_class.class_name) == (PooledPostgresStorage.__module__,
                                                                         PooledPostgresStorage.__name__)

    kept, kept_events = materialized_three_times(PROJECT_ROOT, pg_admin_url, name)
    plain = tmp_path / "plain"
    plain.mkdir()
    storage = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text())["storage"]["custom"]["config"]
    (plain / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": storage}}))
    opened, events = materialized_three_times(plain, pg_admin_url, name)

    # Same runs, same events in the same tables; a connection a part of the storage (and one for the runs'
    # threads) against one a statement.
    assert kept_events == events > 30
    assert kept <= 10, kept
    assert opened >= events, opened


def test_kept_connections_survive_a_postgres_restart(pg_admin_url, monkeypatch):
    """A restart ends every connection the storage keeps; the next statement (a run worker's event write) still
    succeeds, on a new connection."""
    url = embedded.fresh_database_url(pg_admin_url, "dagster")
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    monkeypatch.setenv(STORAGE_URL_VARIABLE, url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with dg.DagsterInstance.from_config(str(PROJECT_ROOT)) as instance:
        assert dg.materialize([counted], instance=instance).success  # every part's connection opened and kept
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            ended = admin.execute("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = %s AND pid <> pg_backend_pid()) AS t", (name,)).fetchone()[0]
        assert ended >= 2
        result = dg.materialize([counted], instance=instance)  # no retry: the first statement must succeed
        assert result.success and len(instance.get_runs()) == 2
