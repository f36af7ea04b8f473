"""The production profile: deploy/dagster.yaml loads as a real instance on Postgres, the code location
answers as a gRPC server (`dagster api grpc`), and the Helm values say what docs/deploy.md says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import yaml

from tests.conftest import PROJECT_ROOT, free_port

BIN = Path(sys.executable).parent
DEPLOY = PROJECT_ROOT / "deploy"


def test_the_production_instance_config_loads_on_postgres(database_url, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", database_url.replace("postgresql://", "postgresql+psycopg2://"))
    instance = dg.DagsterInstance.from_config(str(DEPLOY))
    try:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.get_runs() == []  # the storage answers (and was migrated)
        # The guarantee the profile exists for: one run per user partition (one writer per user's memory).
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    finally:
        instance.dispose()


def test_the_code_location_answers_as_a_grpc_server(database_url):
    from dagster._grpc.client import DagsterGrpcClient

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_")} | {
        "DREAMING_DATABASE_URL": database_url}
    server = subprocess.Popen([str(BIN / "dagster"), "api", "grpc", "-m", "dreaming_dagster.definitions",
                               "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = DagsterGrpcClient(port=port, host="127.0.0.1")
        deadline = time.time() + 120
        while True:
            try:
                if client.health_check_query() == "SERVING":
                    break
            except Exception:
                pass
            assert server.poll() is None, server.stdout.read()
            assert time.time() < deadline, "the gRPC server did not start in 120 s"
            time.sleep(1)
        assert client.ping("dreaming")["echo"] == "dreaming"
        from dagster_shared.serdes import deserialize_value

        repositories = deserialize_value(client.list_repositories())
        assert repositories.repository_symbols, repositories  # the definitions loaded in the server
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_helm_values_agree_with_the_instance_config_and_the_code_location():
    """Three files describe one deployment; they must not drift apart: the module Helm serves is the code
    location's, its run queue limits are the instance config's, and the workspace names the location."""
    import tomllib

    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", project["tool"]["dagster"]["module_name"]]
    helm_limits = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    instance_limits = instance["concurrency"]["runs"]["tag_concurrency_limits"]
    assert [(lim["key"], lim.get("limit")) for lim in helm_limits] == [(lim["key"], lim.get("limit"))
                                                                       for lim in instance_limits]
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["grpc_server"]["location_name"] == project["tool"]["dagster"]["code_location_name"]


def test_the_memory_service_manifest_runs_dreaming_serve_with_probes_the_app_answers():
    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.service.app import create_app

    deployment, service = yaml.safe_load_all((DEPLOY / "k8s" / "memory-service.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:2] == ["dreaming", "serve"] and deployment["kind"] == "Deployment"
    env = {item["name"]: item["value"] for item in container["env"]}
    settings = DreamingSettings(**{name.removeprefix("DREAMING_").lower(): value for name, value in env.items()})
    assert pod["terminationGracePeriodSeconds"] > settings.serve_shutdown_seconds  # in-flight requests finish
    routes = set(create_app(settings).openapi()["paths"])
    assert {container["readinessProbe"]["httpGet"]["path"], service["metadata"]["annotations"]["prometheus.io/path"]} <= routes
    port = container["args"][container["args"].index("--port") + 1]
    assert service["spec"]["ports"][0]["port"] == int(port) == container["ports"][0]["containerPort"]


def test_the_sql_the_package_loads_is_package_data_and_no_benchmark_or_reference_sql_is():
    """The wheel carries every file under the package (hatch's default, nothing forced in); so every query the
    package loads by name, and every migration, must live under dreaming_dagster/sql, and the benchmarks' and
    tests' own SQL must not."""
    import re
    import tomllib

    from dreaming_dagster.sql import MIGRATIONS_DIR, QUERIES_DIR, migration_files

    wheel = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel == {"packages": ["dreaming_dagster"]}
    package = PROJECT_ROOT / "dreaming_dagster"
    loaded = {name for path in package.rglob("*.py")
              for name in re.findall(r'load_sql(?:_without)?\(\s*"([a-z_]+/[a-z0-9_]+)"', path.read_text())}
    assert len(loaded) > 100 and all((QUERIES_DIR / f"{name}.sql").is_file() for name in loaded)
    assert MIGRATIONS_DIR.is_relative_to(package) and len(migration_files()) > 30
    assert not {path.parent.name for path in package.rglob("*.sql")} & {"bench", "reference"}
    assert not (PROJECT_ROOT / "dbt_like_sql").exists()
