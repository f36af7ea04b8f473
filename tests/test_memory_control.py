"""A user's memory under control from every surface: inspect it (Python, CLI, HTTP), export it and import it on
another instance (recall ranks the same), forget through HTTP and the CLI with tenancy, and Dagster's users
partitions kept true to the database (fast-path syncs reported, erased users' partitions removed, the ranker's
training memory left out)."""

from __future__ import annotations

import dataclasses
import json
import os

import dagster as dg
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import dreaming_dagster as dd
from dreaming_dagster.cli import main
from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.defs.pipeline.sensors import fast_path_sensor, pending_pairs_sensor
from dreaming_dagster.defs.resources import DreamingDatabaseResource
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import BatchRejectedError, save_validated_pairs
from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
from dreaming_dagster.pipeline.sync import save_and_sync
from dreaming_dagster.process_defaults import reset_defaults
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.service import api_keys
from dreaming_dagster.service.app import create_app
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import InvalidInputError, parse_pair
from tests.conftest import run_concurrently
from tests.test_forget import CANARY, dreamed, exchanges

QUESTIONS = ["who bakes bread with me?", "where did we drive?", "what did the dog chew?", "which book are we reading?",
             "how do I get to work?", "who moved to Lisbon?"]


def test_inspect_pages_filters_and_reads(database, local_embedder):
    dreamed(database, local_embedder, "alice", exchanges("a", canary_at=(1,)))
    seen, cursor = [], None
    while True:
        page = dd.list_pairs("alice", limit=5, cursor=cursor, database=database)
        seen += page.pairs
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == 12 == len({p["pair_id"] for p in seen})  # every pair once, oldest first
    pages = run_concurrently(lambda: [p["pair_id"] for p in dd.list_pairs("alice", limit=50, database=database).pairs], 4)
    assert all(ids == [p["pair_id"] for p in seen] for ids in pages)  # the same from threads
    assert [p["occurred_at"] for p in seen] == sorted(p["occurred_at"] for p in seen)
    in_session = dd.list_pairs("alice", session_id="a-s1", database=database).pairs
    assert {p["turn_index"] for p in in_session} == {0, 1, 2, 3}
    window = dd.list_pairs("alice", since="2026-02-01", until="2026-03-01", database=database).pairs
    assert {p["session_id"] for p in window} == {"a-s1"}
    cousin = seen[1]
    assert CANARY in cousin["user_message"] and cousin["linked"] and cousin["subjects"]
    read = dd.read_pair("alice", cousin["pair_id"], database=database)
    assert {s["name"] for s in read["subjects"]} == set(cousin["subjects"]) and read["extracted"]
    assert dd.read_pair("bob", cousin["pair_id"], database=database) is None  # another user's id: not found
    found = dd.list_subjects("alice", search=CANARY.lower()[:6], database=database)
    assert found and all(CANARY.lower()[:6] in s["name"].lower() for s in found)
    subject = dd.read_subject("alice", found[0]["subject_id"], database=database)
    assert [p["pair_id"] for p in subject["linked_pairs"]] == [cousin["pair_id"]]
    assert dd.read_subject("alice", found[0]["subject_id"], "elsewhere", database=database) is None
    top = dd.list_subjects("alice", database=database, limit=3)
    assert [s["pairs"] for s in top] == sorted((s["pairs"] for s in top), reverse=True)
    for call, field in ((lambda: dd.list_pairs("alice", cursor="nonsense", database=database), "cursor"),
                        (lambda: dd.list_pairs("alice", since="yesterday-ish", database=database), "since"),
                        (lambda: dd.list_pairs("alice", limit=0, database=database), "limit"),
                        (lambda: dd.read_pair("alice", "42", database=database), "pair_id"),
                        (lambda: dd.list_subjects("alice", search=" ", database=database), "search")):
        with pytest.raises(InvalidInputError) as error:
            call()
        assert error.value.field == field


def test_export_then_ingest_on_another_instance_recalls_the_same(clean_env, database, pg_admin_url, local_embedder,
                                                                  tmp_path):
    dreamed(database, local_embedder, "alice", exchanges("a", canary_at=(1,)))
    clean_env.setenv("DREAMING_DATABASE_URL", database.url)
    reset_defaults()  # the defaults were read before the variable was set
    exported = tmp_path / "alice.jsonl"
    runner = CliRunner()
    result = runner.invoke(main, ["export", "--user", "alice", "--out", str(exported)])
    assert result.exit_code == 0, result.output
    lines = exported.read_text().splitlines()
    assert json.loads(lines[0])["export"]["pairs"] == 12 and len(lines) == 1 + 12 + json.loads(lines[0])["export"]["subjects"]

    other = Database(embedded.fresh_database_url(pg_admin_url, "copy"))
    clean_env.setenv("DREAMING_DATABASE_URL", other.url)
    reset_defaults()
    imported = runner.invoke(main, ["ingest", str(exported), "--user", "alice"])
    assert imported.exit_code == 0, imported.output
    assert "inserted 12" in imported.output and "subjects and" in imported.output
    again = runner.invoke(main, ["ingest", str(exported), "--user", "alice"])  # a re-run: nothing twice
    assert "duplicates 12" in again.output and "already had subjects" in again.output
    original, copy = Recaller(database, local_embedder), Recaller(other, local_embedder)

    def texts(recaller: Recaller) -> list[list[str]]:
        return [[m.user_message for m in recaller.recall("alice", q, 10).memories] for q in QUESTIONS]

    assert texts(copy) == texts(original)
    assert sorted(s["name"] for s in dd.list_subjects("alice", database=other, limit=500)) == \
        sorted(s["name"] for s in dd.list_subjects("alice", database=database, limit=500))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(lines[0] + "\n" + json.dumps({"session_id": "s", "user_message": 5}) + "\n")
    refused = runner.invoke(main, ["ingest", str(broken), "--user", "carol"])
    assert refused.exit_code == 2 and "line 2" in refused.output and "user_message" in refused.output
    for recaller in (original, copy):
        recaller.close()


def test_an_import_checks_the_whole_file_before_it_stores_anything(clean_env, database, local_embedder, tmp_path):
    """Header version and counts, repeated subjects or pairs, references to subjects the file does not hold,
    values the database would refuse: the import names the line and field, exits 2 and stores nothing."""
    from dreaming_dagster.memory.export import export_lines

    dreamed(database, local_embedder, "alice", exchanges("a")[:6])
    clean_env.setenv("DREAMING_DATABASE_URL", database.url)
    reset_defaults()
    lines = [json.loads(line) for line in export_lines("alice", database=database)]
    header, pairs = lines[0], [r for r in lines[1:] if "subject" not in r]
    subjects = [r for r in lines[1:] if "subject" in r]
    assert len(pairs) == 6 and len(subjects) >= 3 and any(p["dream"]["subjects"] for p in pairs)
    linked = next(n for n, p in enumerate(pairs) if p["dream"]["subjects"])

    def variant(**changes) -> list[dict]:
        head = {"export": {**header["export"], **changes.get("header", {})}}
        body = changes.get("pairs", pairs) + changes.get("subjects", subjects)
        return [head, *body]

    bad_ref = [dict(p, dream=dict(p["dream"], subjects=["s999"])) if n == linked else p for n, p in enumerate(pairs)]
    bad_merge = [{"subject": dict(subjects[0]["subject"], merged_into="s999")}, *subjects[1:]]
    bad_importance = [{"subject": dict(subjects[0]["subject"], importance=7)}, *subjects[1:]]
    bad_time = [dict(p, dream=dict(p["dream"], times=[{"source": "text", "position": 0, "expression": "x",
                                                       "first_day": "2024-13-01", "last_day": "2024-01-01",
                                                       "granularity": "day", "certainty": 1}])) if n == 0 else p
                for n, p in enumerate(pairs)]
    def extracted(items: list) -> list[dict]:
        return [dict(p, dream=dict(p["dream"], extracted_subjects=items)) if n == 0 else p
                for n, p in enumerate(pairs)]

    cases = {
        "extracted subject of unknown fields": (variant(pairs=extracted([{"foo": 1}])),
                                                "dream.extracted_subjects[0].foo"),
        "extracted subjects not objects": (variant(pairs=extracted(["oops", 3])), "dream.extracted_subjects[0]"),
        "extracted subject without a name": (variant(pairs=extracted([{"subject_id": "not-a-uuid"}])),
                                             "dream.extracted_subjects[0].name"),
        "extracted subject of another instance": (variant(pairs=extracted([{"name": "Lisbon",
                                                                            "subject_id": "not-a-uuid"}])),
                                                  "dream.extracted_subjects[0].subject_id"),
        "repeated subject": (variant(subjects=[*subjects, subjects[0]],
                                     header={"subjects": len(subjects) + 1}), "subject.ref"),
        "subjects only": (variant(pairs=[]), "export.pairs"),
        "version 99": (variant(header={"version": 99}), "export.version"),
        "counts off": (variant(header={"pairs": 7}), "export.pairs"),
        "repeated pair": (variant(pairs=[*pairs, pairs[0]], header={"pairs": 7}), "record"),
        "unknown subject": (variant(pairs=bad_ref), "dream.subjects"),
        "unknown merge target": (variant(subjects=bad_merge), "subject.merged_into"),
        "importance out of range": (variant(subjects=bad_importance), "subject.importance"),
        "impossible dated event": (variant(pairs=bad_time), "dream.times"),
    }
    runner = CliRunner()
    for name, (records, field) in cases.items():
        file = tmp_path / f"{name.replace(' ', '-')}.jsonl"
        file.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        refused = runner.invoke(main, ["ingest", str(file), "--user", "carol"])
        assert refused.exit_code == 2 and field in refused.output and "line" in refused.output, (name, refused.output)
        assert dd.list_pairs("carol", database=database).pairs == [], name
        assert dd.list_subjects("carol", database=database, include_archived=True) == [], name
    # A key twice in one object means two things: refused, as the HTTP API refuses it.
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join([json.dumps(variant()[0]), json.dumps(pairs[0])[:-1] + ', "session_id": "x"}',
                                *[json.dumps(r) for r in variant()[2:]]]) + "\n")
    refused = runner.invoke(main, ["ingest", str(twice), "--user", "carol"])
    assert refused.exit_code == 2 and "session_id" in refused.output and "twice" in refused.output, refused.output
    # A failure half-way through the writes (after the pairs and subjects) stores nothing either.
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(json.dumps(r) for r in variant()) + "\n")
    from dreaming_dagster.memory import export

    def failing_write(*args, **kwargs):
        raise RuntimeError("the disk filled up half-way")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "write_keys", failing_write)
        failed = runner.invoke(main, ["ingest", str(whole), "--user", "carol"])
    assert failed.exit_code != 0 and "half-way" in str(failed.exception)
    assert dd.list_pairs("carol", database=database).pairs == []
    assert dd.list_subjects("carol", database=database, include_archived=True) == []
    imported = runner.invoke(main, ["ingest", str(whole), "--user", "carol"])
    links = sum(len(p["dream"]["subjects"]) for p in pairs)
    assert imported.exit_code == 0 and f"{len(subjects):,} subjects and {links:,} links imported" in imported.output
    with database.connect() as conn:
        stored = conn.execute("SELECT count(*) AS n FROM subject_memory_pair_links WHERE user_id = 'carol'").fetchone()
    assert stored["n"] == links
    # The imported graph dreams on: a new pair is merged and linked by the next sync.
    dd.save_pairs("carol", [{"session_id": "new", "user_message": "My cousin moved to Lisbon last month",
                             "assistant_message": "Lovely city.", "occurred_at": "2026-05-01T10:00:00Z"}],
                  database=database, embedder=local_embedder)
    synced = dd.sync_user("carol", database=database, embedder=local_embedder, extractor=OfflineExtractor())
    assert synced.extraction["pairs"] == 1 and synced.links.get("links", 0) >= 1


def test_forget_and_inspect_commands(cli_env, tmp_path):
    runner = CliRunner()
    records = tmp_path / "alice.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in exchanges("a", canary_at=(1,))) + "\n")
    assert runner.invoke(main, ["ingest", str(records), "--user", "alice"]).exit_code == 0
    listed = runner.invoke(main, ["inspect", "pairs", "--user", "alice", "--limit", "5", "--json"])
    page = json.loads(listed.output)
    assert len(page["pairs"]) == 5 and page["next_cursor"]
    table = runner.invoke(main, ["inspect", "pairs", "--user", "alice", "--limit", "5"])
    assert "next page: --cursor" in table.output and "a-s0" in table.output
    pair_id = page["pairs"][1]["pair_id"]
    shown = runner.invoke(main, ["inspect", "pair", pair_id, "--user", "alice"])
    assert CANARY in json.loads(shown.output)["user_message"]
    assert runner.invoke(main, ["inspect", "pair", pair_id, "--user", "bob"]).exit_code == 2
    runner.invoke(main, ["sync", "--user", "alice"])
    subjects = json.loads(runner.invoke(main, ["inspect", "subjects", "--user", "alice", "--json"]).output)
    assert subjects and runner.invoke(main, ["inspect", "subject", subjects[0]["subject_id"], "--user", "alice"]
                                      ).exit_code == 0
    forgot = runner.invoke(main, ["forget", "--user", "alice", "--pair", pair_id])
    assert forgot.exit_code == 0 and "forgot 1 pair(s)" in forgot.output
    session = runner.invoke(main, ["forget", "--user", "alice", "--session", "a-s2"])
    assert "forgot 4 pair(s)" in session.output
    assert runner.invoke(main, ["forget", "--user", "alice"]).exit_code == 2  # nothing named
    refused = runner.invoke(main, ["forget", "--user", "alice", "--everything"], input="n\n")
    assert refused.exit_code == 1 and len(dd.list_pairs("alice").pairs) == 7
    erased = runner.invoke(main, ["forget", "--user", "alice", "--everything", "--yes"])
    assert "forgot 7 pair(s)" in erased.output and dd.list_pairs("alice").pairs == []


@pytest.fixture
def tenants(database, database_url, local_embedder, tmp_path):
    app = create_app(DreamingSettings(database_url=database_url, data_dir=tmp_path), database=database,
                     embedder=local_embedder)
    with TestClient(app) as client:
        secrets = {t: api_keys.create_key(database, local_embedder.spec, t)[0] for t in ("acme", "globex")}
        yield client, {t: {"Authorization": f"Bearer {s}"} for t, s in secrets.items()}


def test_http_inspect_export_and_forget_stay_in_the_keys_tenant(tenants, database, database_url):
    client, h = tenants
    for tenant in ("acme", "globex"):
        body = {"user_id": "alice", "sync": True, "pairs": exchanges(tenant[0], canary_at=(1,))}
        assert client.post("/v1/pairs", headers=h[tenant], json=body).status_code == 200
    page = client.get("/v1/users/alice/pairs", headers=h["acme"], params={"limit": 5}).json()
    assert len(page["pairs"]) == 5 and page["next_cursor"]
    rest = client.get("/v1/users/alice/pairs", headers=h["acme"], params={"cursor": page["next_cursor"]}).json()
    assert len(rest["pairs"]) == 7 and rest["next_cursor"] is None
    acme_pair = page["pairs"][1]["pair_id"]
    one = client.get(f"/v1/users/alice/pairs/{acme_pair}", headers=h["acme"]).json()
    assert CANARY in one["user_message"] and one["subjects"] and one["times"] == []
    subjects = client.get("/v1/users/alice/subjects", headers=h["acme"], params={"search": "lisbon"}).json()["subjects"]
    assert [s["name"] for s in subjects] == ["Lisbon"]
    subject = client.get(f"/v1/users/alice/subjects/{subjects[0]['subject_id']}", headers=h["acme"]).json()
    assert [p["pair_id"] for p in subject["linked_pairs"]] == [acme_pair]
    export = client.get("/v1/users/alice/export", headers=h["acme"])
    assert export.headers["content-type"].startswith("application/x-ndjson")
    assert json.loads(export.text.splitlines()[0])["export"]["kg_id"] == "acme"
    # Another tenant's key reads and deletes nothing of acme's: not found, whatever the id.
    for response in (client.get(f"/v1/users/alice/pairs/{acme_pair}", headers=h["globex"]),
                     client.get(f"/v1/users/alice/subjects/{subjects[0]['subject_id']}", headers=h["globex"]),
                     client.delete(f"/v1/pairs/{acme_pair}", headers=h["globex"])):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert client.get("/v1/users/alice/pairs/42", headers=h["acme"]).json()["error"]["field"] == "pair_id"
    assert client.get("/v1/users/alice/pairs", headers=h["acme"], params={"limit": 0}).status_code == 422
    assert client.delete("/v1/pairs/42", headers={}).status_code == 401
    deleted = client.delete(f"/v1/pairs/{acme_pair}", headers=h["acme"]).json()
    assert deleted["pairs"] == 1 and deleted["pair_ids"] == [acme_pair]
    assert client.delete(f"/v1/pairs/{acme_pair}", headers=h["acme"]).status_code == 404
    session = client.delete("/v1/users/alice/sessions/a-s2", headers=h["acme"]).json()
    assert session["pairs"] == 4
    erased = client.delete("/v1/users/alice", headers=h["acme"], params={"confirm": "alice"}).json()
    assert erased["pairs"] == 7 and erased["kg_ids"] == ["acme"]
    assert client.get("/v1/users/alice/pairs", headers=h["acme"]).json()["pairs"] == []
    globex = client.get("/v1/users/alice/pairs", headers=h["globex"], params={"limit": 50}).json()["pairs"]
    assert len(globex) == 12 and any(CANARY in p["user_message"] for p in globex)  # the other tenant's alice
    recalled = client.post("/v1/recall", headers=h["globex"], json={"user_id": "alice", "query": f"{CANARY} Lisbon"})
    assert CANARY in recalled.json()["memories"][0]["user_message"]


def test_no_path_a_client_shortens_erases_a_user_and_odd_ids_are_refused_at_save(tenants, database, local_embedder,
                                                                                  tmp_path):
    client, h = tenants
    for user in ("alice", "victim-x"):
        assert client.post("/v1/pairs", headers=h["acme"], json={
            "user_id": user, "pairs": exchanges(user[0])[:3]}).json()["inserted"] == 3
    # httpx, like curl, removes dot segments before sending: these reach DELETE /v1/users/victim-x, /alice, and
    # /alice/sessions/, and each must be refused rather than erase anyone.
    for path in ("/v1/users/alice/sessions/../../victim-x", "/v1/users/alice/sessions/..",
                 "/v1/users/alice/sessions/."):
        refused = client.delete(path, headers=h["acme"])
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["error"]["field"] in {"confirm", "session_id"}
    assert client.delete("/v1/users/alice", headers=h["acme"], params={"confirm": "bob"}).status_code == 422
    for user in ("alice", "victim-x"):
        assert len(client.get(f"/v1/users/{user}/pairs", headers=h["acme"]).json()["pairs"]) == 3
    # Ids a URL path cannot carry are refused at save, naming the field, on every surface.
    for session in ("..", ".", "../../victim-x", "chat/./42", "chat/", "a//b", "%2e%2E"):
        answer = client.post("/v1/pairs", headers=h["acme"], json={
            "user_id": "alice", "strict": True, "pairs": [{**exchanges("a")[0], "session_id": session}]})
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "pairs", (session, answer.text)
        assert "session_id" in answer.text
        with pytest.raises(BatchRejectedError, match="field 'session_id'"):
            dd.save_pairs("alice", [{**exchanges("a")[0], "session_id": session}], strict=True, database=database)
    for user in ("..", "."):
        answer = client.post("/v1/pairs", headers=h["acme"], json={"user_id": user, "pairs": exchanges("a")[:1]})
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "user_id"
        with pytest.raises(InvalidInputError, match="user_id"):
            dd.save_pairs(user, exchanges("a")[:1], database=database)
    dotted = tmp_path / "dotted.jsonl"
    dotted.write_text(json.dumps({**exchanges("a")[0], "session_id": "a/../b"}) + "\n")
    ingested = CliRunner().invoke(main, ["ingest", str(dotted), "--user", "alice", "--strict"])
    assert ingested.exit_code != 0 and "session_id" in ingested.output
    ingested = CliRunner().invoke(main, ["ingest", str(tmp_path / "dotted.jsonl"), "--user", ".."])
    assert ingested.exit_code != 0 and "user_id" in ingested.output
    # Rows saved before the rule stay forgettable: by the query-string route, and from Python under any user id.
    legacy = [dataclasses.replace(parse_pair(exchanges("a")[i]), session_id=session)
              for i, session in ((0, ".."), (1, "chat/"))]
    assert save_validated_pairs(database, local_embedder, "alice", "acme", legacy).inserted == 2
    assert save_validated_pairs(database, local_embedder, "..", "default", legacy[:1]).inserted == 1
    for session in ("..", "chat/"):
        gone = client.delete("/v1/users/alice/sessions", headers=h["acme"], params={"session_id": session})
        assert gone.status_code == 200 and gone.json()["pairs"] == 1, gone.text
    assert dd.erase_user("..", "default", database=database).pairs == 1
    assert len(client.get("/v1/users/alice/pairs", headers=h["acme"]).json()["pairs"]) == 3


def sensed(sensor, instance, database_url: str, cursor: str | None = None):
    """``sensor`` evaluated once, as the daemon would: its resources set up for the tick, torn down after."""
    from dreaming_dagster.definitions import defs

    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs(), resources={
            "dreaming_db": DreamingDatabaseResource(database_url=database_url)}) as context:
        return sensor(context)


def test_fast_path_users_show_in_dagster_and_erased_users_leave_it(database, database_url, local_embedder):
    for user in ("carol", "dave"):
        save_and_sync(user, exchanges(user[0])[:3], database=database, embedder=local_embedder,
                      extractor=OfflineExtractor())
    with dg.instance_for_test() as instance:
        first = sensed(fast_path_sensor, instance, database_url)
        partitions = [r for r in first.dynamic_partitions_requests if isinstance(r, dg.AddDynamicPartitionsRequest)]
        assert sorted(partitions[0].partition_keys) == ["carol", "dave"]
        instance.add_dynamic_partitions("users", ["carol", "dave"])
        for event in first.asset_events:
            instance.report_runless_asset_event(event)
        for asset in ("memory_pairs", "pair_dates", "pair_subjects", "subjects", "subject_links", "refined_subjects"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {"carol", "dave"}
        links = next(e for e in first.asset_events if e.asset_key == dg.AssetKey("subject_links")
                     and e.partition == "carol")
        assert links.metadata["path"].value == "fast path" and links.metadata["user_pairs"].value == 3
        assert links.metadata["links"].value > 0
        quiet = sensed(fast_path_sensor, instance, database_url, first.cursor)
        assert isinstance(quiet, dg.SkipReason)  # each sync is reported once
        # Runs naming carol: a finished run of her partition (with its captured logs), one still running, and a
        # user_memory_job run (its config holds her id).
        from dagster._core.storage.compute_log_manager import ComputeIOType

        from dreaming_dagster.definitions import defs

        loaded = defs()
        done = instance.create_run_for_job(loaded.resolve_job_def("dreaming_job"), status=dg.DagsterRunStatus.SUCCESS,
                                           tags={"dagster/partition": "carol"})
        running = instance.create_run_for_job(loaded.resolve_job_def("dreaming_job"),
                                              status=dg.DagsterRunStatus.STARTED, tags={"dagster/partition": "carol"})
        asked = instance.create_run_for_job(loaded.resolve_job_def("user_memory_job"), status=dg.DagsterRunStatus.SUCCESS,
                                            run_config={"ops": {"user_request": {"config": {"user_id": "carol"}}}})
        logs = instance.compute_log_manager
        with logs.open_log_stream([done.run_id, "compute_logs", "step"], ComputeIOType.STDOUT) as stream:
            stream.write("carol's step said something")
        assert logs.get_log_data([done.run_id, "compute_logs", "step"]).stdout
        dd.erase_user("carol", database=database)
        waiting = sensed(fast_path_sensor, instance, database_url, first.cursor)
        # Her partition's run still runs: nothing of the partition goes under it, and the forget stays open.
        assert isinstance(waiting, dg.SkipReason)  # no partition deleted, the cursor where it was
        assert instance.get_run_by_id(running.run_id) and instance.get_run_by_id(done.run_id)
        assert instance.get_run_by_id(asked.run_id) is None  # a finished request goes at once
        instance.report_run_failed(running)
        after = sensed(fast_path_sensor, instance, database_url, first.cursor)
        # The partition is deleted by the sensor itself: a request would be recorded in the tick, naming her.
        assert after.dynamic_partitions_requests == []
        assert "carol" not in instance.get_dynamic_partitions("users")
        assert [instance.get_run_by_id(run.run_id) for run in (done, running)] == [None, None]
        assert not logs.get_log_data([done.run_id, "compute_logs", "step"]).stdout
        assert isinstance(sensed(fast_path_sensor, instance, database_url, after.cursor), dg.SkipReason)


def test_the_training_memory_is_no_users_partition(database, database_url, local_embedder):
    dd.save_pairs("longmemeval", exchanges("t")[:2], TRAINING_KG_ID, database=database, embedder=local_embedder,
                  embed=False)
    dd.save_pairs("erin", exchanges("e")[:2], database=database, embedder=local_embedder, embed=False)
    with dg.instance_for_test() as instance:
        result = sensed(pending_pairs_sensor, instance, database_url)
    assert [r.partition_key for r in result.run_requests] == ["erin"]
    save_and_sync("longmemeval", exchanges("t")[2:4], TRAINING_KG_ID, database=database, embedder=local_embedder,
                  extractor=OfflineExtractor())
    with dg.instance_for_test() as instance:
        reported = sensed(fast_path_sensor, instance, database_url)
    assert isinstance(reported, dg.SkipReason)


@pytest.mark.slow  # starts processes or loads the model
def test_the_first_calls_of_a_fresh_process_may_come_from_threads(tmp_path):
    """A backend's first memory calls can race from its worker threads: the process's default database and
    embedder are built once, not once per thread (two embedded-server handles at once failed)."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    script = ("import threading, dreaming_dagster as dd\n"
              "failures = []\n"
              "def call(n):\n"
              "    try:\n"
              "        dd.list_pairs(f'user{n}'); dd.erase_user(f'user{n}')\n"
              "    except Exception as error:\n"
              "        failures.append(repr(error))\n"
              "threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]\n"
              "[t.start() for t in threads]; [t.join() for t in threads]\n"
              "print(failures)\n"
              "raise SystemExit(1 if failures else 0)\n")
    # The embedded default (a data directory of its own), as a user's first process meets it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_")} | {"DREAMING_DATA_DIR": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        subprocess.run([sys.executable, "-m", "dreaming_dagster.cli", "db", "stop"], cwd=PROJECT_ROOT, env=env,
                       capture_output=True, timeout=120)
