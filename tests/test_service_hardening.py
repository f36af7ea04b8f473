"""The service under attack and after a crash, probed from outside as a hostile client would: `dreaming serve`
on its own embedded Postgres, killed with SIGKILL mid-sync and restarted on the same port, stopped past its
grace period, flooded with wrong keys, held open by idle and slow connections; malformed bodies; two tenants
sharing user ids; `dreaming mcp` fed lines that are no messages."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.service import api_keys
from dreaming_dagster.service.app import create_app
from dreaming_dagster.storage import embedded
from tests.conftest import PROJECT_ROOT, bench_sql, free_port, pair

pytestmark = pytest.mark.slow  # starts the service and kills it

CLI = [sys.executable, "-m", "dreaming_dagster.cli"]


# ------------------------------------------------------------------------------------ a real server
class Served:
    """`dreaming serve` subprocesses on the embedded default in a data directory of their own."""

    def __init__(self, data_dir: Path, stub_url: str, **settings: str):
        self.data_dir = data_dir
        self.env = {name: value for name, value in os.environ.items()
                    if not name.startswith("DREAMING_") and name != "DAGSTER_HOME"}
        self.env |= {"DREAMING_DATA_DIR": str(data_dir), "DREAMING_EMBEDDING_PROVIDER": "openai",
                     "DREAMING_EMBEDDING_MODEL": "stub-embed-16", "DREAMING_EMBEDDING_DIMENSIONS": "16",
                     "DREAMING_EMBEDDING_BASE_URL": stub_url, **settings}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], env=self.env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=120)

    def key(self, tenant: str) -> dict[str, str]:
        created = self.cli("keys", "create", "--tenant", tenant)
        assert created.returncode == 0, created.stderr
        return {"Authorization": f"Bearer {created.stdout.strip().splitlines()[-1]}"}

    def start(self) -> subprocess.Popen:
        """A server whose output goes to a file (a pipe nobody reads would fill and block its access log)."""
        self.started = getattr(self, "started", 0) + 1
        log = self.data_dir / f"serve-{self.started}.log"
        with log.open("w") as out:
            process = subprocess.Popen([*CLI, "serve", "--port", str(self.port)], env=self.env, cwd=PROJECT_ROOT,
                                       stdout=out, stderr=subprocess.STDOUT, text=True)
        process.log = log
        return process

    def wait_healthy(self, process: subprocess.Popen, within: float = 120) -> float:
        started = time.monotonic()
        while time.monotonic() - started < within:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                time.sleep(0.1)
            assert process.poll() is None, process.log.read_text()
        raise AssertionError("dreaming serve did not come up")

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])

    def admin_connection(self, database: str = "dreaming") -> psycopg.Connection:
        return psycopg.connect(embedded.embedded_url(self.data_dir / "pgdata", database), autocommit=True)

    def graph_lock_held(self, user_id: str = "alice", kg_id: str = "acme") -> bool:
        """Whether a sync holds the graph lock of (user, kg) (storage/user_graphs.user_graph_lock's key)."""
        with self.admin_connection() as conn:
            return conn.execute(bench_sql("graph_lock_held"), {"user_id": user_id, "kg_id": kg_id}).fetchone()[0]

    def stop_database(self) -> None:
        embedded.stop(self.data_dir / "pgdata")


@pytest.fixture
def served(tmp_path_factory, openai_stub):
    # A short path: the embedded server's socket lives in the data directory.
    servers = Served(tmp_path_factory.mktemp("srv"), openai_stub.base_url, DREAMING_SERVE_SHUTDOWN_SECONDS="1")
    yield servers
    servers.stop_database()


def big_save(count: int, offset: int = 0) -> list[dict]:
    return [pair(offset + i, session=f"s{i // 20}", user_message=f"I met Priya Sharma in Lisbon about the Tesla "
                 f"order number {offset + i}", assistant_message=f"Noted the Lisbon meeting {offset + i}.")
            for i in range(count)]


def sync_in_background(served: Served, headers: dict, pairs: list[dict]) -> tuple[threading.Thread, list]:
    answer: list = []

    def send() -> None:
        try:
            answer.append(httpx.post(f"{served.url}/v1/pairs", headers=headers, timeout=120,
                                     json={"user_id": "alice", "sync": True, "pairs": pairs}))
        except httpx.HTTPError as error:
            answer.append(error)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, answer


def wait_for(condition, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"waited {within} s for {what}")


def test_a_server_killed_mid_sync_leaves_nothing_behind_and_restarts_on_its_port(served):
    headers = served.key("acme")
    first = served.start()
    served.wait_healthy(first)
    postmaster = served.postmaster_pid()
    # A second server on the taken port fails before it touches the database: the first and Postgres live on.
    refused = served.start()
    assert refused.wait(timeout=60) != 0 and "cannot listen" in refused.log.read_text()
    assert served.postmaster_pid() == postmaster and psutil.pid_exists(postmaster)
    assert httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200

    thread, answer = sync_in_background(served, headers, big_save(300))
    # Mid-sync, with the extraction's worker processes parsing (a batch of 300 goes to two of them).
    wait_for(lambda: served.graph_lock_held() and len(psutil.Process(first.pid).children()) >= 2, 90,
             "the sync to hold the user's graph lock with its extraction workers started")
    family = [first.pid] + [child.pid for child in psutil.Process(first.pid).children(recursive=True)]
    first.kill()
    first.wait(timeout=10)
    gone, alive = psutil.wait_procs([psutil.Process(pid) for pid in family if psutil.pid_exists(pid)], timeout=10)
    assert not alive, f"processes of the killed server survive: {alive}"
    thread.join(timeout=30)
    assert answer and isinstance(answer[0], httpx.HTTPError)  # the client is told at once: the connection closed

    restarted = served.start()
    try:
        restart_seconds = served.wait_healthy(restarted, within=30)
        assert restart_seconds < 10
        assert served.postmaster_pid() == postmaster  # the embedded Postgres kept running throughout
        synced = httpx.post(f"{served.url}/v1/sync", headers=headers, json={"user_id": "alice", "report": True},
                            timeout=120)
        assert synced.status_code == 200, synced.text
        broken = ("without links", "duplicated", "share a name", "parked")  # graph_warnings' health checks
        assert not [w for w in synced.json()["warnings"] if any(word in w for word in broken)], synced.text
        memory = httpx.get(f"{served.url}/v1/users/alice/stats", headers=headers, timeout=30).json()["memory"]
        assert memory["pending_embedding"] == memory["pending_extraction"] == 0
        assert memory["pairs"] == 300  # saved before the sync began: the kill cost none of it
        # SIGTERM while a sync outlasts the grace period (1 s): the server and all of it end, the client is
        # answered (the connection closes) instead of waiting for its own timeout.
        thread, answer = sync_in_background(served, headers, big_save(300, offset=1000))
        wait_for(served.graph_lock_held, 90, "the second sync to hold the graph lock")
        family = [restarted.pid] + [c.pid for c in psutil.Process(restarted.pid).children(recursive=True)]
        signalled = time.monotonic()
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)
        gone, alive = psutil.wait_procs([psutil.Process(pid) for pid in family if psutil.pid_exists(pid)], timeout=10)
        assert not alive
        thread.join(timeout=30)
        assert answer and time.monotonic() - signalled < 30
    finally:
        for process in (first, restarted):
            if process.poll() is None:
                process.kill()
    assert served.postmaster_pid() == postmaster and psutil.pid_exists(postmaster)


def test_sigterm_stops_the_embedded_server_the_service_started(served):
    """The last process using the embedded Postgres stops it on its way out, a server stopped by SIGTERM
    too (uvicorn dies by the signal it re-raises, which skipped the exit hooks)."""
    process = served.start()
    served.wait_healthy(process)
    postmaster = served.data_dir / "pgdata" / "postmaster.pid"
    assert postmaster.exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM  # still says "stopped by SIGTERM"
    wait_for(lambda: not postmaster.exists(), 30, "the embedded server to stop")


def test_timeouts_close_slow_clients_and_a_key_in_the_query_string_is_refused(served):
    # The flood of wrong keys (429s, the database transactions it costs) is the service-faults bench's smoke run.
    served.env |= {"DREAMING_SERVE_HEADER_TIMEOUT_SECONDS": "1", "DREAMING_SERVE_BODY_TIMEOUT_SECONDS": "2",
                   "DREAMING_SERVE_IDLE_TIMEOUT_SECONDS": "1"}
    headers = served.key("acme")
    process = served.start()
    try:
        served.wait_healthy(process)
        # A key sent in the query string is refused and never written to the log.
        secret = headers["Authorization"].split()[1]
        assert httpx.get(f"{served.url}/v1/users/u/stats?api_key={secret}", timeout=5).status_code in (401, 429)

        # A connection that sends nothing, and one that sends its headers a byte at a time, are closed.
        idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(20)]
        slow = socket.create_connection(("127.0.0.1", served.port))
        started = time.monotonic()
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n":
            try:
                slow.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.2)
            if time.monotonic() - started > 6:
                break
        for conn in [*idle, slow]:
            conn.settimeout(5)
            answer = conn.recv(4096)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
            conn.close()
        assert time.monotonic() - started < 10
        # A body sent a byte a second: 408 naming the body after the body timeout (2 s).
        body = json.dumps({"user_id": "u", "query": "slow"}).encode()
        slow_body = socket.create_connection(("127.0.0.1", served.port))
        slow_body.send(b"POST /v1/recall HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                       + f"Authorization: {headers['Authorization']}\r\ncontent-length: {len(body)}\r\n\r\n".encode())
        started = time.monotonic()
        slow_body.settimeout(0.5)
        received = b""
        for byte in body:
            try:
                slow_body.send(bytes([byte]))
                received += slow_body.recv(4096)
                break
            except TimeoutError:
                continue
            except OSError:
                break
        slow_body.settimeout(5)
        while chunk := slow_body.recv(4096):  # the rest of the answer, until the server closes
            received += chunk
        assert received.startswith(b"HTTP/1.1 408") and b'"field": "body"' in received, received
        assert time.monotonic() - started < 6
        slow_body.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    log = process.log.read_text()
    assert secret not in log and "?[redacted]" in log


# ----------------------------------------------------------------------------------------- in process
@pytest.fixture
def service(database, database_url, embedder16, tmp_path):
    app = create_app(DreamingSettings(database_url=database_url, data_dir=tmp_path, serve_max_body_bytes=5000),
                     database=database, embedder=embedder16)
    with TestClient(app) as client:
        secrets_by_tenant = {tenant: api_keys.create_key(database, embedder16.spec, tenant)[0] for tenant in ("acme", "globex")}
        yield client, {tenant: {"Authorization": f"Bearer {secret}"} for tenant, secret in secrets_by_tenant.items()}


def test_malformed_bodies_are_refused_naming_the_body_or_the_field(service):
    client, headers = service
    h = {**headers["acme"], "content-type": "application/json"}

    def streamed(size: int):
        for _ in range(size // 1000):
            yield b" " * 1000

    cases = [
        (client.post("/v1/recall", headers=h, content=b'{"user_id": "u", "query": "\xff\xfe"}'), 400, "body"),
        (client.post("/v1/recall", headers=h, content=b"[" * 990 + b"]" * 990), 400, "body"),
        (client.post("/v1/recall", headers=h, content=b'{"user_id": "u", "query": '), 400, "body"),
        (client.post("/v1/recall", headers=h, content=streamed(20_000)), 413, "body"),
        (client.post("/v1/recall", headers=h, content=b'{"user_id": "u", "query": "a", "query": "b"}'), 422, "query"),
        (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "q", "k": "10"}), 422, "k"),
        (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "q", "k": True}), 422, "k"),
        (client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "q", "as_of": 12345}), 422, "as_of"),
        (client.post("/v1/sync", headers=h, json={"user_id": "u", "report": "yes"}), 422, "report"),
        (client.post("/v1/pairs", headers=h, json={"user_id": "u", "pairs": [], "strict": 1}), 422, "strict"),
    ]
    for response, status, field in cases:
        assert (response.status_code, response.json()["error"]["field"]) == (status, field), response.text
    assert client.post("/v1/recall", headers=h, json={"user_id": "u", "query": "q", "k": 3}).status_code == 200


HUGE = "9" * 4400  # past Python's 4,300-digit limit for reading an integer (within the 5,000-byte body limit)


def test_nul_out_of_range_and_oversized_numbers_are_refused_naming_the_field(service):
    """Every route refuses a NUL, an integer its column cannot hold and a number too long to read with a 422
    naming the field, and stores or deletes nothing for it."""
    client, headers = service
    h = {**headers["acme"], "content-type": "application/json"}
    assert client.post("/v1/pairs", headers=h, json={"user_id": "alice", "pairs": [pair(1)]}).json()["inserted"] == 1
    sent = [
        (client.delete("/v1/users/alice/sessions/%00", headers=h), "session_id"),
        (client.delete("/v1/users/alice/sessions/a%00b", headers=h), "session_id"),
        (client.get("/v1/users/alice/pairs?session_id=a%00b", headers=h), "session_id"),
        (client.get("/v1/users/alice/pairs?since=2024%00", headers=h), "since"),
        (client.get("/v1/users/alice/pairs?cursor=%00", headers=h), "cursor"),
        (client.get("/v1/users/alice/subjects?search=%00", headers=h), "search"),
        (client.get("/v1/users/alice/subjects?offset=99999999999999999999", headers=h), "offset"),
        (client.get("/v1/users/alice/subjects?limit=99999999999999999999", headers=h), "limit"),
        (client.get(f"/v1/users/alice/subjects?offset={HUGE}", headers=h), "offset"),
        (client.get(f"/v1/users/alice/pairs?limit=-{HUGE}", headers=h), "limit"),
        (client.get("/v1/users/alice/pairs?until=9999-12-31T23:59:59-14:00", headers=h), "until"),
        (client.get("/v1/users/al%00ice/stats", headers=h), "user_id"),
        (client.get("/v1/users/alice/subjects/%00", headers=h), "subject_id"),
        (client.delete("/v1/pairs/%00", headers=h), "pair_id"),
        (client.post("/v1/recall", headers=h, content=f'{{"user_id": "alice", "query": "q", "k": {HUGE}}}'), "k"),
        (client.post("/v1/recall", headers=h, content=f'{{"user_id": "alice", "query": "q", "k": -{HUGE}}}'), "k"),
        (client.post("/v1/recall", headers=h, content='{"user_id": "alice", "query": "q", "k": 1e999}'), "k"),
        (client.post("/v1/recall", headers=h, json={"user_id": "alice", "query": "a\x00b"}), "query"),
        (client.post("/v1/recall", headers=h, json={"user_id": "alice", "query": "q", "session_id": "\x00"}),
         "session_id"),
        (client.post("/v1/sync", headers=h, content=f'{{"user_id": "alice", "report": {HUGE}}}'), "report"),
        (client.post("/v1/pairs", headers=h, content=f'{{"user_id": "alice", "pairs": [{{"session_id": "s", '
                     f'"user_message": "m", "occurred_at": "2024-01-01T00:00:00Z", "turn_index": {HUGE}}}]}}'),
         "turn_index"),
        (client.post("/v1/pairs", headers=h, content='{"user_id": "alice", "strict": true, "pairs": [{"session_id": '
                     '"s", "user_message": "m", "occurred_at": "2024-01-01T00:00:00Z", "metadata": {"x": 1e999}}]}'),
         "pairs"),  # a strict batch: refused whole, each rejection naming its field
    ]
    for response, field in sent:
        assert response.status_code == 422, (field, response.status_code, response.text)
        assert response.headers["content-type"] == "application/json" and response.json()["error"]["field"] == field
    assert sent[-1][0].json()["error"]["rejected"][0]["field"] == "metadata"
    listed = client.get("/v1/users/alice/pairs", headers=h).json()["pairs"]
    assert [p["user_message"] for p in listed] == [pair(1)["user_message"]]  # nothing stored, nothing forgotten


def test_failed_authentications_are_throttled_per_address(database, database_url, embedder16, tmp_path):
    app = create_app(DreamingSettings(database_url=database_url, data_dir=tmp_path, serve_auth_failure_burst=3,
                                      serve_auth_failure_rate=0.1), database=database, embedder=embedder16)
    with TestClient(app) as client:
        good = {"X-API-Key": api_keys.create_key(database, embedder16.spec, "acme")[0]}
        used = {"X-API-Key": api_keys.create_key(database, embedder16.spec, "acme")[0]}
        assert client.get("/v1/users/u/stats", headers=used).status_code == 200
        statuses = [client.get("/v1/users/u/stats", headers={"X-API-Key": f"dd_{n}"}).status_code for n in range(5)]
        assert statuses == [401, 401, 401, 429, 429]
        limited = client.get("/v1/users/u/stats", headers=good)  # refused before the key is looked up
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        # A key that authenticated before is still looked up from the throttled address, and honoured...
        assert client.get("/v1/users/u/stats", headers=used).status_code == 200
        (row,) = [k for k in api_keys.list_keys(database, embedder16.spec) if k["prefix"] == used["X-API-Key"][:10]]
        api_keys.revoke_key(database, embedder16.spec, row["id"])
        assert client.get("/v1/users/u/stats", headers=used).status_code == 401  # ...until it is revoked
        assert client.get("/v1/users/u/stats", headers=used).status_code == 429
    with TestClient(app, client=("10.1.2.3", 5000)) as other_address:
        assert other_address.get("/v1/users/u/stats", headers=good).status_code == 200


@settings(max_examples=int(os.environ.get("DREAMING_FUZZ_EXAMPLES", 15)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(saves=st.lists(st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["ann", "bob"]),
                                st.integers(0, 50), st.booleans()), min_size=1, max_size=5),
       actor=st.sampled_from(["acme", "globex"]), user=st.sampled_from(["ann", "bob"]))
def test_two_tenants_sharing_user_ids_never_see_each_others_work(service, database, saves, actor, user):
    """A tenant's save, sync, report and stats touch and count only its own graph of a user: whatever the
    other tenant stored, deferred or broke for the same user id, the answer is the one it would be alone."""
    client, headers = service
    other = "globex" if actor == "acme" else "acme"
    for tenant, who, n, embed in saves:
        assert client.post("/v1/pairs", headers=headers[tenant], json={
            "user_id": who, "embed": embed, "pairs": [pair(n, user_message=f"{tenant} {who} note {n}")]}).status_code == 200
    with database.connect() as conn:  # the other tenant's graph of the user has a stored pair with no links
        conn.execute("UPDATE pair_stages SET extracted_subjects = '[{\"name\": \"X\"}]', extracted_at = now(), "
                     "subjects_merged_at = now(), kg_stored_at = now() WHERE user_id = %s AND kg_id = %s",
                     (user, other))
        others_before = conn.execute(
            "SELECT count(*) FILTER (WHERE embedding IS NULL) AS unembedded, count(*) AS pairs FROM memory_pairs "
            "WHERE user_id = %s AND kg_id = %s", (user, other)).fetchone()
    mine = sum(1 for tenant, who, n, _ in {(t, w, n, None) for t, w, n, _ in saves} if tenant == actor and who == user)
    mine_unembedded = client.get(f"/v1/users/{user}/stats", headers=headers[actor]).json()["memory"]
    synced = client.post("/v1/sync", headers=headers[actor], json={"user_id": user, "report": True}).json()
    assert synced["embedding"].get("embedded", 0) == (mine_unembedded["pending_embedding"] if mine_unembedded else 0)
    assert synced["warnings"] == []  # the other tenant's broken graph is not this one's warning
    assert all(r["kg_id"] == actor for r in synced["graph"])
    stats = client.get(f"/v1/users/{user}/stats", headers=headers[actor]).json()
    assert (stats["memory"]["pairs"] if stats["memory"] else 0) == mine
    with database.connect() as conn:
        others_after = conn.execute(
            "SELECT count(*) FILTER (WHERE embedding IS NULL) AS unembedded, count(*) AS pairs FROM memory_pairs "
            "WHERE user_id = %s AND kg_id = %s", (user, other)).fetchone()
        conn.execute("DELETE FROM memory_pairs")  # the next example starts empty
    assert others_after == others_before  # nothing of the other tenant's was embedded, written or removed


# ------------------------------------------------------------------------------------------------ MCP
def test_mcp_answers_every_line_and_shares_the_http_limits(cli_env):
    process = subprocess.Popen([*CLI, "mcp", "--kg-id", "agents"], env={**os.environ}, cwd=PROJECT_ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    replies: list[dict] = []
    reader = threading.Thread(target=lambda: [replies.append(json.loads(line)) for line in process.stdout], daemon=True)
    reader.start()

    def send(raw: bytes, expect: int) -> dict:
        process.stdin.write(raw + b"\n")
        process.stdin.flush()
        wait_for(lambda: len(replies) >= expect, 120, f"reply {expect} to {raw[:60]!r}")
        return replies[expect - 1]

    def call(ident: int, name: str, arguments: dict) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}}).encode()

    try:
        init = send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}).encode(), 1)
        assert init["id"] == 1 and "result" in init
        process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        assert send(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/li', 2)["error"]["code"] == -32700  # truncated
        lone = send(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall", '
                    b'"arguments": {"user_id": "u", "query": "\\ud800"}}}', 3)
        assert lone["id"] == 3 and lone["error"]["code"] == -32600
        assert send(b"\xff\xfe{}", 4)["error"]["code"] == -32700
        assert send(b'{"no": "message"}', 5)["error"]["code"] == -32600
        too_many = send(call(6, "recall", {"user_id": "u", "query": "q", "k": 101}), 6)
        assert too_many["result"]["isError"] and "'k'" in too_many["result"]["content"][0]["text"]
        too_long = send(call(7, "recall", {"user_id": "u", "query": "x" * 4001}), 7)
        assert too_long["result"]["isError"] and "'query'" in too_long["result"]["content"][0]["text"]
        fine = send(call(8, "recall", {"user_id": "u", "query": "q", "k": 100}), 8)
        assert fine["id"] == 8 and not fine["result"].get("isError")
        # Numbers too long to read, as the id or as an argument: a JSON-RPC error naming the field.
        huge_id = send(b'{"jsonrpc": "2.0", "id": ' + HUGE.encode() + b', "method": "tools/list"}', 9)
        assert huge_id["id"] is None and "'id'" in huge_id["error"]["message"]
        huge_k = send(call(10, "recall", {"user_id": "u", "query": "q"})[:-3] + b', "k": ' + HUGE.encode() + b'}}}', 10)
        assert huge_k["id"] == 10 and huge_k["error"]["code"] == -32602 and "'k'" in huge_k["error"]["message"]
        for ident, (tool, arguments, field) in enumerate([
                ("forget", {"user_id": "u", "session_id": "a\x00b"}, "session_id"),
                ("browse_memory", {"user_id": "u", "subjects": True, "search": "\x00"}, "search"),
                ("browse_memory", {"user_id": "u", "session_id": "\x00"}, "session_id"),
                ("browse_memory", {"user_id": "u", "cursor": "\x00"}, "cursor"),
                ("recall", {"user_id": "u", "query": "q", "session_id": "\x00"}, "session_id"),
                ("remember", {"user_id": "u", "user_message": "a\x00", "assistant_message": "b", "session_id": "s"},
                 "user_message")], start=11):
            refused = send(call(ident, tool, arguments), ident)
            assert refused["result"]["isError"] and f"'{field}'" in refused["result"]["content"][0]["text"], refused
        assert send(call(17, "recall", {"user_id": "u", "query": "q"}), 17)["id"] == 17  # still serving
    finally:
        process.stdin.close()
        process.wait(timeout=60)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
_TOOL_ARGUMENTS = st.dictionaries(
    st.sampled_from(["user_id", "query", "k", "session_id", "as_of", "pair_ids", "everything", "subjects", "search",
                     "limit", "cursor", "user_message", "assistant_message", "occurred_at", "dream_now", "extra"]),
    _JSON_VALUES | st.sampled_from(["u", "\x00", "a" * 5000, "\ud800"]) | st.integers(-2**70, 2**70), max_size=6)


@st.composite
def _hostile_lines(draw) -> tuple[bytes, str | None]:
    """A line a hostile or broken client could send, and the id it must be answered with (None: any answer or
    none, as for a notification)."""
    ident = f"fuzz-{draw(st.integers(0, 10**9))}"
    kind = draw(st.sampled_from(["bytes", "huge", "deep", "call", "json", "method"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200)).replace(b"\n", b" ").replace(b"\r", b" "), None
    if kind == "huge":
        digits = "9" * draw(st.integers(4300, 6000))
        where = draw(st.sampled_from(["id", "k", "limit", "turn"]))
        if where == "id":
            return f'{{"jsonrpc": "2.0", "id": {digits}, "method": "ping"}}'.encode(), None
        return (f'{{"jsonrpc": "2.0", "id": "{ident}", "method": "tools/call", "params": {{"name": "recall", '
                f'"arguments": {{"user_id": "u", "query": "q", "{where}": -{digits}}}}}}}').encode(), ident
    if kind == "deep":
        depth = draw(st.integers(1, 3000))
        return ("[" * depth + "]" * depth).encode(), None
    if kind == "call":
        tool = draw(st.sampled_from(["recall", "remember", "browse_memory", "forget", "nope"]))
        return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                           "params": {"name": tool, "arguments": draw(_TOOL_ARGUMENTS)}}).encode(), ident
    if kind == "method":
        return json.dumps({"jsonrpc": "2.0", "id": ident, "method": draw(st.text(max_size=20)),
                           "params": draw(_JSON_VALUES)}).encode(), ident
    return json.dumps(draw(_JSON_VALUES)).encode(), None


def test_dreaming_mcp_survives_any_line(cli_env):
    """Random bytes, numbers too long to read, deep nesting, wrong types, unknown methods: `dreaming mcp`
    answers every request among them with its id and keeps serving (a ping after each line is answered)."""
    process = subprocess.Popen([*CLI, "mcp", "--kg-id", "agents"], env={**os.environ}, cwd=PROJECT_ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    replies: dict[object, dict] = {}
    reader = threading.Thread(target=lambda: [replies.setdefault(json.loads(line).get("id"), json.loads(line))
                                              for line in process.stdout], daemon=True)
    reader.start()

    def send(raw: bytes) -> None:
        process.stdin.write(raw + b"\n")
        process.stdin.flush()

    send(json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}).encode())
    wait_for(lambda: "init" in replies, 120, "the initialize reply")
    send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    pings = iter(range(10**6))

    @settings(max_examples=int(os.environ.get("DREAMING_FUZZ_EXAMPLES", 15)) * 4, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(line=_hostile_lines())
    def each_line_is_answered(line: tuple[bytes, str | None]) -> None:
        raw, ident = line
        send(raw)
        ping = f"ping-{next(pings)}"
        send(json.dumps({"jsonrpc": "2.0", "id": ping, "method": "ping"}).encode())
        # Requests run concurrently: a tool call may be answered after the ping that follows it.
        wait_for(lambda: (ping in replies and (ident is None or ident in replies)) or process.poll() is not None,
                 120, f"the answers after {raw[:80]!r}")
        assert process.poll() is None, f"dreaming mcp exited on {raw[:80]!r}"

    try:
        each_line_is_answered()
    finally:
        process.stdin.close()
        process.wait(timeout=60)
