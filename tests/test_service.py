"""The memory service: the HTTP API (routes, keys and tenancy, limits, errors, metrics) in process and as
`dreaming serve` from outside, the `dreaming keys` commands, and the MCP tools through the SDK's client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreaming_dagster.cli import main
from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.service import api_keys
from dreaming_dagster.service.app import create_app
from dreaming_dagster.service.limits import TokenBucket
from tests.conftest import PROJECT_ROOT, free_port, pair, run_concurrently


def service_settings(database_url: str, tmp_path, **overrides) -> DreamingSettings:
    return DreamingSettings(database_url=database_url, data_dir=tmp_path, **overrides)


@pytest.fixture
def service(database, database_url, embedder16, tmp_path):
    """An app over the test's database and the stub's 16-d embeddings, and a key for two tenants."""
    app = create_app(service_settings(database_url, tmp_path), database=database, embedder=embedder16)
    with TestClient(app) as client:
        secrets = {tenant: api_keys.create_key(database, embedder16.spec, tenant)[0] for tenant in ("acme", "globex")}
        yield client, {tenant: {"Authorization": f"Bearer {secret}"} for tenant, secret in secrets.items()}


def test_every_route_needs_a_live_key_and_errors_have_one_shape(service, database, embedder16):
    client, headers = service
    for response in (client.post("/v1/recall", json={"user_id": "u", "query": "q"}),
                     client.post("/v1/recall", json={"user_id": "u", "query": "q"},
                                 headers={"Authorization": "Bearer dd_not-a-key"}),
                     client.get("/v1/users/u/stats", headers={"X-API-Key": "wrong"})):
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert set(response.json()["error"]) >= {"code", "message", "field"}
    assert client.get("/v1/users/u/stats", headers=headers["acme"]).status_code == 200
    (acme,) = [k for k in api_keys.list_keys(database, embedder16.spec) if k["kg_id"] == "acme"]
    api_keys.revoke_key(database, embedder16.spec, acme["id"])
    assert client.get("/v1/users/u/stats", headers=headers["acme"]).status_code == 401  # revoked: at once
    assert client.get("/v1/nowhere", headers=headers["globex"]).json()["error"]["code"] == "not_found"


def test_save_recall_sync_and_stats_through_the_api(service):
    client, headers = service
    h = headers["acme"]
    saved = client.post("/v1/pairs", headers=h, json={"user_id": "alice", "pairs": [
        pair(1, user_message="I adopted a beagle named Max"), pair(2, user_message="My sister Rachel lives in Lisbon"),
        {"user_message": "no session"}]}).json()
    assert saved["inserted"] == 2 and saved["rejected"] == [
        {"record": 2, "field": "session_id", "reason": "is required (a non-empty string)"}]
    again = client.post("/v1/pairs", headers=h, json={"user_id": "alice", "pairs": [pair(1, user_message="I adopted a beagle named Max")]})
    assert again.json()["inserted"] == 0 and again.json()["duplicates"] == 1  # a retried request stores nothing twice
    strict = client.post("/v1/pairs", headers=h, json={"user_id": "alice", "strict": True,
                                                       "pairs": [pair(3), {"session_id": "s", "user_message": 5}]})
    assert strict.status_code == 422 and strict.json()["error"]["code"] == "batch_rejected"
    assert strict.json()["error"]["rejected"][0]["field"] == "user_message"
    recalled = client.post("/v1/recall", headers=h, json={"user_id": "alice", "query": "what is my dog called?", "k": 2})
    body = recalled.json()
    assert recalled.status_code == 200 and len(body["memories"]) == 2 and body["kg_id"] == "acme"
    assert set(body["memories"][0]["signals"]) >= {"cos", "lex", "subj_sem", "time_fit"} and body["model"]
    assert body["time"] is None  # the question names no time
    dated = client.post("/v1/recall", headers=h, json={"user_id": "alice", "query": "what did I adopt in March 2024?",
                                                       "as_of": "2024-04-02T00:00:00Z"}).json()
    assert dated["time"]["label"] == "1–31 March 2024" and dated["time"]["relation"] == "in"
    assert dated["model"] == "cosine + BM25 and time fit (no usable model)"
    synced = client.post("/v1/sync", headers=h, json={"user_id": "alice", "report": True}).json()
    assert synced["extraction"]["pairs"] == 2 and synced["graph"][0]["pairs"] == 2
    assert synced["keys"]["pairs"] == 2  # the keying stage ran for both, and says so
    stats = client.get("/v1/users/alice/stats", headers=h).json()
    assert stats["memory"]["pairs"] == 2 and stats["graph"]["subjects"] >= 1 and stats["kg_id"] == "acme"
    assert client.get("/v1/users/bad%20id/stats", headers=h).json()["error"]["field"] == "user_id"


def test_save_with_sync_dreams_in_the_same_request_for_the_keys_tenant_only(service):
    client, headers = service
    saved = client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "alice", "sync": True, "pairs": [
        pair(1, user_message="I adopted a beagle named Max"), {"user_message": "no session"}]})
    body = saved.json()
    assert saved.status_code == 200 and body["inserted"] == 1 and body["rejected"][0]["field"] == "session_id"
    assert body["sync"]["extraction"]["pairs"] == 1 and body["sync"]["links"]["links"] >= 1
    stats = {tenant: client.get("/v1/users/alice/stats", headers=headers[tenant]).json() for tenant in headers}
    assert stats["acme"]["graph"]["subjects"] >= 1 and stats["acme"]["memory"]["pairs"] == 1
    assert stats["globex"]["memory"] is None and stats["globex"]["graph"] is None  # the other tenant: nothing
    retried = client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "alice", "sync": True,
                                                                      "pairs": [pair(1, user_message="I adopted a beagle named Max")]}).json()
    assert retried["duplicates"] == 1 and retried["sync"]["extraction"].get("pairs", 0) == 0
    assert "sync" not in client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "alice", "pairs": [pair(2)]}).json()
    wrong = client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "alice", "sync": "soon", "pairs": [pair(3)]})
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "sync"


def test_limits_answer_413_or_422_naming_the_field(database, database_url, embedder16, tmp_path):
    app = create_app(service_settings(database_url, tmp_path, serve_max_records=3, serve_max_body_bytes=5000,
                                      recall_max_query_chars=50, recall_max_k=20),
                     database=database, embedder=embedder16)
    with TestClient(app) as client:
        h = {"X-API-Key": api_keys.create_key(database, embedder16.spec, "acme")[0]}
        cases = [
            (client.post("/v1/pairs", headers=h, json={"user_id": "u", "pairs": [pair(i) for i in range(4)]}), 413, "pairs"),
            (client.post("/v1/pairs", headers=h, content=b"{" + b" " * 6000 + b"}"), 413, "body"),
            (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "x" * 51}), 422, "query"),
            (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "x", "k": 21}), 422, "k"),
            (client.post("/v1/recall", headers=h, json={"user_id": "u"}), 422, "query"),
            (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "x", "as_of": "yesterday"}), 422, "as_of"),
            (client.post("/v1/recall", headers=h, json={"user_id": "", "query": "x"}), 422, "user_id"),
        ]
        for response, status, field in cases:
            assert (response.status_code, response.json()["error"]["field"]) == (status, field), response.text


def test_a_key_past_its_rate_gets_429_with_retry_after(database, database_url, embedder16, tmp_path):
    app = create_app(service_settings(database_url, tmp_path, serve_rate_per_second=0.5, serve_rate_burst=2),
                     database=database, embedder=embedder16)
    with TestClient(app) as client:
        h = {"X-API-Key": api_keys.create_key(database, embedder16.spec, "acme")[0]}
        other = {"X-API-Key": api_keys.create_key(database, embedder16.spec, "acme")[0]}
        statuses = [client.get("/v1/users/u/stats", headers=h).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        limited = client.get("/v1/users/u/stats", headers=h)
        assert limited.headers["retry-after"] == "2" and limited.json()["error"]["code"] == "rate_limited"
        assert client.get("/v1/users/u/stats", headers=other).status_code == 200  # per key


def test_the_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.take("k") for _ in range(2)] == [0.0, 0.0] and bucket.take("k") == pytest.approx(0.5)
    now[0] = 0.5
    assert bucket.take("k") == 0.0 and bucket.take("other") == 0.0


@settings(max_examples=int(os.environ.get("DREAMING_FUZZ_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(saves=st.lists(st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["ann", "bob", "cy"]),
                                st.integers(0, 10_000)), min_size=1, max_size=6),
       reader=st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["ann", "bob", "cy"])))
def test_a_tenants_key_never_reads_or_writes_another_tenants_memory(service, saves, reader):
    client, headers = service
    for tenant, user, n in saves:
        response = client.post("/v1/pairs", headers=headers[tenant], json={
            "user_id": user, "pairs": [pair(n, user_message=f"{tenant} {user} note {n}")]})
        assert response.status_code == 200
    tenant, user = reader
    memories = client.post("/v1/recall", headers=headers[tenant],
                           json={"user_id": user, "query": "note", "k": 100}).json()["memories"]
    assert all(m["user_message"].startswith(f"{tenant} {user} ") for m in memories)
    stats = client.get(f"/v1/users/{user}/stats", headers=headers[tenant]).json()
    assert stats["memory"] is None or stats["memory"]["pairs"] == len(memories)


def test_health_and_metrics(service):
    client, headers = service
    from dreaming_dagster.storage.database import load_migrations

    assert client.get("/healthz").json() == {"status": "ok", "database": "reachable",
                                             "schema_version": load_migrations()[-1].version}
    client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "u", "embed": False, "pairs": [pair(1)]})
    client.post("/v1/recall", headers=headers["acme"], json={"user_id": "u", "query": "x"})
    text = client.get("/metrics").text
    assert 'dreaming_http_requests_total{method="POST",route="/v1/pairs",status="200"} 1.0' in text
    assert 'dreaming_http_request_seconds_count{method="POST",route="/v1/recall"} 1.0' in text
    assert 'dreaming_pending_pairs{stage="embedding"} 1.0' in text and "dreaming_failed_pairs 0.0" in text
    assert "dd_" not in text  # no key in the metrics
    assert client.get("/docs").status_code == 200 and "/v1/recall" in client.get("/openapi.json").json()["paths"]


def test_metrics_count_refused_unmatched_and_failed_requests(service, monkeypatch):
    client, headers = service
    assert client.post("/v1/recall", json={"user_id": "u", "query": "q"}).status_code == 401
    assert client.get("/v1/nowhere", headers=headers["acme"]).status_code == 404
    assert client.post("/v1/recall", headers=headers["acme"], json={"user_id": "u", "k": 0}).status_code == 422

    def broken(*_args, **_kwargs):
        raise RuntimeError("recall broke")

    monkeypatch.setattr(client.app.state.service.recaller, "recall", broken)
    with pytest.raises(RuntimeError, match="recall broke"):  # TestClient re-raises what the server answers 500 for
        client.post("/v1/recall", headers=headers["acme"], json={"user_id": "u", "query": "q"})
    text = client.get("/metrics").text
    for route, status in (("/v1/recall", 401), ("unmatched", 404), ("/v1/recall", 422), ("/v1/recall", 500)):
        assert f'dreaming_http_requests_total{{method="{"GET" if route == "unmatched" else "POST"}",route="{route}",' \
               f'status="{status}"}} 1.0' in text
    assert 'dreaming_http_request_seconds_count{method="POST",route="/v1/recall"} 3.0' in text


def test_keys_commands(cli_env):
    runner = CliRunner()
    created = runner.invoke(main, ["keys", "create", "--tenant", "acme", "--name", "backend"])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[-1]
    assert secret.startswith("dd_") and len(secret) > 40
    listed = runner.invoke(main, ["keys", "list"])
    assert "tenant=acme" in listed.output and "live" in listed.output and secret not in listed.output
    key_id = listed.output.split()[0]
    assert runner.invoke(main, ["keys", "revoke", key_id]).exit_code == 0
    assert "revoked" in runner.invoke(main, ["keys", "list"]).output
    assert runner.invoke(main, ["keys", "revoke", "nope"]).exit_code != 0
    refused = runner.invoke(main, ["keys", "create", "--tenant", "bad tenant"])
    assert refused.exit_code != 0 and "kg_id" in refused.output


def _serve(env: dict, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "dreaming_dagster.cli", "serve", "--port", str(port)], env=env,
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.3)
        assert process.poll() is None, process.stdout.read()
    process.kill()
    raise AssertionError("dreaming serve did not come up")


def test_dreaming_serve_from_outside_and_a_graceful_stop(cli_env, database_url):
    env = {**os.environ}
    runner = CliRunner()
    secret = runner.invoke(main, ["keys", "create", "--tenant", "acme"]).stdout.strip().splitlines()[-1]
    port = free_port()
    process = _serve(env, port)
    url, h = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {secret}"}
    try:
        saved = httpx.post(f"{url}/v1/pairs", headers=h, json={"user_id": "alice", "pairs": [pair(1)]}, timeout=30)
        assert saved.status_code == 200 and saved.json()["inserted"] == 1
        dreamed = httpx.post(f"{url}/v1/pairs", headers=h, timeout=60, json={
            "user_id": "bob", "sync": True, "pairs": [pair(2, user_message="We hiked Mount Tam with Priya")]})
        assert dreamed.status_code == 200 and dreamed.json()["sync"]["extraction"]["pairs"] == 1
        recalled = run_concurrently(lambda: httpx.post(f"{url}/v1/recall", headers=h, timeout=60,
                                                       json={"user_id": "alice", "query": "user message"}), 8)
        assert all(r.status_code == 200 and len(r.json()["memories"]) == 1 for r in recalled)
        # Inspect and forget from outside; the serving process's next recall no longer finds the pair.
        listed = httpx.get(f"{url}/v1/users/bob/pairs", headers=h, timeout=30).json()["pairs"]
        assert [p["user_message"] for p in listed] == ["We hiked Mount Tam with Priya"] and listed[0]["subjects"]
        assert httpx.post(f"{url}/v1/recall", headers=h, timeout=60, json={
            "user_id": "bob", "query": "Mount Tam hike"}).json()["memories"]
        forgot = httpx.delete(f"{url}/v1/pairs/{listed[0]['pair_id']}", headers=h, timeout=30)
        assert forgot.status_code == 200 and forgot.json()["pairs"] == 1
        assert httpx.post(f"{url}/v1/recall", headers=h, timeout=60, json={
            "user_id": "bob", "query": "Mount Tam hike"}).json()["memories"] == []
        assert httpx.delete(f"{url}/v1/users/bob", headers=h, params={"confirm": "bob"}, timeout=30).json()["pairs"] == 0
        # What a hostile client sends is a 422 naming the field, never a 500 (tests/test_service_hardening.py
        # tries every route in process).
        hostile = [(httpx.delete(f"{url}/v1/users/alice/sessions/%00", headers=h, timeout=30), "session_id"),
                   (httpx.get(f"{url}/v1/users/alice/pairs?session_id=a%00b", headers=h, timeout=30), "session_id"),
                   (httpx.get(f"{url}/v1/users/alice/subjects?search=%00", headers=h, timeout=30), "search"),
                   (httpx.get(f"{url}/v1/users/alice/subjects?offset=99999999999999999999", headers=h, timeout=30),
                    "offset"),
                   (httpx.post(f"{url}/v1/recall", headers={**h, "content-type": "application/json"}, timeout=30,
                               content='{"user_id": "alice", "query": "q", "k": ' + "9" * 5000 + "}"), "k")]
        assert [(r.status_code, r.json()["error"]["field"]) for r, _ in hostile] == [(422, f) for _, f in hostile]
        # A session id holding "/" is forgotten whether the client sends it encoded or as it is.
        slashed = [pair(n, session=f"chat/{n}") for n in (42, 43)]
        assert httpx.post(f"{url}/v1/pairs", headers=h, json={"user_id": "carol", "pairs": slashed},
                          timeout=30).json()["inserted"] == 2
        for sent in ("chat%2F42", "chat/43"):
            gone = httpx.delete(f"{url}/v1/users/carol/sessions/{sent}", headers=h, timeout=30)
            assert gone.status_code == 200 and gone.json()["pairs"] == 1, gone.text
        assert httpx.get(f"{url}/v1/users/carol/pairs", headers=h, timeout=30).json()["pairs"] == []
        # A large save (seconds of embedding) in flight when SIGTERM arrives still completes, whole.
        big = [pair(i, session="big", user_message=f"long day number {i} " * 40) for i in range(100, 500)]
        answer: list = []

        def send() -> None:
            response = httpx.post(f"{url}/v1/pairs", headers=h, json={"user_id": "alice", "pairs": big}, timeout=120)
            answer.append((response, time.monotonic()))

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.3)  # the request is on the server (a few ms) and its ~1 s of embedding under way
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        sender.join(timeout=120)
        assert answer and answer[0][1] > signalled  # the answer came after the signal: it was in flight
        # uvicorn re-raises the signal once it has shut down, so the exit status says "stopped by SIGTERM".
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
        assert answer[0][0].status_code == 200 and answer[0][0].json()["inserted"] == 400
    finally:
        if process.poll() is None:
            process.kill()
    log = process.stdout.read()
    assert secret not in log and "Shutting down" in log


def test_the_mcp_tools_through_the_sdks_client(cli_env):
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "dreaming_dagster.cli", "mcp", "--kg-id", "agents"],
                                   env={**os.environ}, cwd=str(PROJECT_ROOT))

    async def session() -> tuple:
        async with Client(params, read_timeout_seconds=120) as client:
            tools = sorted(tool.name for tool in (await client.list_tools()).tools)
            exchange = {"user_id": "alice", "user_message": "My sister Rachel moved to Lisbon",
                        "assistant_message": "Lisbon is lovely in spring.", "session_id": "chat-1",
                        "occurred_at": "2026-05-01T09:00:00Z"}
            stored = await client.call_tool("remember", exchange)
            twice = await client.call_tool("remember", exchange)  # a retry
            recalled = await client.call_tool("recall", {"user_id": "alice", "query": "where does Rachel live?"})
            dated = await client.call_tool("recall", {"user_id": "alice", "query": "what did Rachel do in May 2026?"})
            refused = await client.call_tool("remember", {"user_id": "bad id", "user_message": "x",
                                                          "assistant_message": "y", "session_id": "s"})
            dreamed = await client.call_tool("remember", {
                "user_id": "alice", "user_message": "We hiked Mount Tam with Priya", "session_id": "chat-2",
                "assistant_message": "Mount Tam has great views.", "dream_now": True})
            browsed = await client.call_tool("browse_memory", {"user_id": "alice"})
            subjects = await client.call_tool("browse_memory", {"user_id": "alice", "subjects": True, "search": "rach"})
            every = await client.call_tool("browse_memory", {"user_id": "alice", "subjects": True, "limit": 50})
            paged, cursor = [], None
            while True:  # a page at a time, by the cursor each page returns
                page = await client.call_tool("browse_memory", {"user_id": "alice", "subjects": True, "limit": 1,
                                                                "cursor": cursor})
                paged += [s["name"] for s in page.structured_content["subjects"]]
                cursor = page.structured_content["next_cursor"]
                if cursor is None:
                    break
            first = browsed.structured_content["pairs"][0]["pair_id"]
            forgot = await client.call_tool("forget", {"user_id": "alice", "pair_ids": [first]})
            unclear = await client.call_tool("forget", {"user_id": "alice", "session_id": "chat-2", "everything": True})
            erased = await client.call_tool("forget", {"user_id": "alice", "everything": True})
            left = await client.call_tool("browse_memory", {"user_id": "alice"})
            return (tools, stored, twice, recalled, refused, dreamed, dated,
                    (browsed, subjects, forgot, unclear, erased, left), (every, paged))

    tools, stored, twice, recalled, refused, dreamed, dated, control, (every, paged) = anyio.run(session)
    browsed, subjects, forgot, unclear, erased, left = control
    assert [p["user_message"] for p in browsed.structured_content["pairs"]] == [
        "My sister Rachel moved to Lisbon", "We hiked Mount Tam with Priya"]
    assert [s["name"] for s in subjects.structured_content["subjects"]] == ["Rachel"]
    assert len(paged) >= 3 and paged == [s["name"] for s in every.structured_content["subjects"]]
    assert every.structured_content["next_cursor"] is None
    assert forgot.structured_content["pairs"] == 1 and unclear.is_error and "exactly one" in str(unclear.content)
    assert erased.structured_content["pairs"] == 1 and left.structured_content["pairs"] == []
    assert recalled.structured_content["time"] is None
    assert dated.structured_content["time"]["label"] == "1–31 May 2026"
    # dream_now: saved and dreamed in the call (the first exchange, still pending, is dreamed with it)
    assert dreamed.structured_content["stored"] == 1 and dreamed.structured_content["subjects_linked"] >= 1
    assert stored.structured_content["subjects_linked"] is None
    assert tools == ["browse_memory", "forget", "recall", "remember"]
    assert stored.structured_content["stored"] == 1 and twice.structured_content["duplicate"] == 1
    memories = recalled.structured_content["memories"]
    assert memories and "Rachel" in memories[0]["user_message"]
    assert refused.is_error and "user_id" in str(refused.content)


def test_the_openapi_page_shows_every_answer_and_both_ways_to_send_a_key(service):
    client, _ = service
    spec = client.get("/openapi.json").json()
    assert set(spec["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyHeader"}
    shapes = spec["components"]["schemas"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if path.startswith("/v1/") and not path.endswith("/export"):
                answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
                assert answer.get("$ref", "").startswith("#/components/schemas/"), (method, path, answer)
                assert {"HTTPBearer": []} in operation["security"], (method, path)
    # The MCP tools answer with the same shapes: a recalled memory is the HTTP one without its signals.
    from dreaming_dagster.service import shapes as shared

    assert set(shared.Memory.model_fields) < set(shapes["RankedMemory"]["properties"])
    assert set(shared.Forgot.model_fields) < set(shapes["Forgotten"]["properties"])
    assert set(shared.StoredPair.model_fields) < set(shapes["ListedPair"]["properties"])


def test_a_request_body_is_parsed_once(service, monkeypatch):
    from starlette.requests import Request

    client, headers = service

    async def parse_again(self):
        raise AssertionError("the body was parsed a second time")

    monkeypatch.setattr(Request, "json", parse_again)  # what FastAPI would call without the guard's value
    saved = client.post("/v1/pairs", headers=headers["acme"], json={"user_id": "alice", "pairs": [pair(1)]})
    assert saved.status_code == 200 and saved.json()["inserted"] == 1
    recalled = client.post("/v1/recall", headers=headers["acme"], json={"user_id": "alice", "query": "message", "k": 1})
    assert recalled.status_code == 200 and len(recalled.json()["memories"]) == 1


def test_the_python_api_http_and_mcp_hold_one_recall_limit(clean_env, database_url, tmp_path):
    from dreaming_dagster.retrieval.recaller import RecallLimits
    from dreaming_dagster.storage.records import InvalidInputError

    clean_env.setenv("DREAMING_RECALL_MAX_K", "20")
    settings = DreamingSettings(database_url=database_url, data_dir=tmp_path)
    assert RecallLimits.from_settings(settings) == RecallLimits(max_k=20, max_query_chars=4000)
    from dreaming_dagster import recall

    with pytest.raises(InvalidInputError, match="k.*between 1 and 20"):
        recall("alice", "anything", k=21)
    clean_env.setenv("DREAMING_RECALL_MAX_K", "201")  # past the hard ceiling: the setting names itself
    with pytest.raises(ValueError, match="recall_max_k"):
        DreamingSettings()
