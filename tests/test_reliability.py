"""Hostile input and failing providers (issue: every bad input a rejection, every failure recoverable,
nothing lost). Each test is a case that failed on the code before it, at the layer where the fault is."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from dreaming_dagster.cli import main
from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.consolidation.consolidators import Proposal
from dreaming_dagster.consolidation.passes import PassFailedError, run_pass
from dreaming_dagster.defs.pipeline.checks import parked_pairs_check
from dreaming_dagster.extraction.extractors import OpenAIExtractor
from dreaming_dagster.extraction.schema import Extraction
from dreaming_dagster.ingest.embedding import user_stats
from dreaming_dagster.ingest.readers import iter_longmemeval_questions, read_jsonl, read_longmemeval
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.llm.client import JSONChatClient, LLMCallError, ProviderUnavailableError
from dreaming_dagster.pipeline.extracting import extract_pending, reset_failed_extractions
from dreaming_dagster.pipeline.pending_work import pending_work_params
from dreaming_dagster.retrieval.ranker import CompositeRanker, save_ranker
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.records import InvalidInputError
from dreaming_dagster.storage.user_graphs import MAX_EXTRACTION_ATTEMPTS
from tests.conftest import PROJECT_ROOT, pair, reference_sql, run_concurrently
from tests.retrieval_fixtures import HashEmbedder

GOOD = json.dumps({"summary": "User plans a Lisbon trip.", "subjects": [
    {"name": "Lisbon", "description": "trip in June", "type": "place"}]})


def count_pairs(database, user_id: str) -> int:
    """The user's stored pairs (0 when nothing was ever stored, not even the schema)."""
    with database.connect(vectors=False) as conn:
        if conn.execute("SELECT to_regclass('memory_pairs') AS t").fetchone()["t"] is None:
            return 0
        return conn.execute("SELECT count(*) AS n FROM memory_pairs WHERE user_id = %s", (user_id,)).fetchone()["n"]


def chat_client(stub, **overrides) -> JSONChatClient:
    options = {"model": "main-model", "fallback_model": None, "base_url": stub.base_url, "api_key": "k",
               "attempts_per_model": 2, "backoff_s": 0.0, "timeout_s": 10.0} | overrides
    return JSONChatClient(**options)


# ------------------------------------------------------------------------ 1. the public API, repeatedly
@pytest.fixture
def api_env(clean_env, database_url, tmp_path):
    """The public API's defaults (the local MiniLM embedder) pointed at a scratch database."""
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    clean_env.setenv("DREAMING_DATA_DIR", str(tmp_path))  # no ranker file there: cosine ranking
    return clean_env


def test_public_recall_works_every_time_from_threads_and_a_fresh_process(api_env, database_url):
    import dreaming_dagster as dd
    import dreaming_dagster.retrieval.recaller  # noqa: F401  (importing it used to shadow recall)

    dd.save_pairs("alice", [pair(1, user_message="I adopted a beagle named Max")])
    first, second = dd.recall("alice", "what dog did I adopt?"), dd.recall("alice", "my beagle")
    assert first.memories and second.memories
    results = run_concurrently(lambda: dd.recall("alice", "beagle"), 8)
    assert all(r.memories[0].user_message == "I adopted a beagle named Max" for r in results)
    script = ("import dreaming_dagster as dd\n"
              "import dreaming_dagster.retrieval.recaller\n"
              "a = dd.recall('alice', 'beagle'); b = dd.recall('alice', 'Max')\n"
              "saved = [dd.save_pairs('bob', [{'session_id': 's', 'occurred_at': '2026-01-01T00:00:00Z', 'user_message': f'bob note {n}', "
              "'assistant_message': 'ok'}]).inserted for n in range(2)]\n"
              "synced = [dd.sync_user('bob').extraction.get('pairs', 0) for _ in range(2)]\n"
              "print(len(a.memories), len(b.memories), *saved, *synced)\n")
    env = {**os.environ, "DREAMING_DATABASE_URL": database_url}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1", "1", "1", "2", "0"]  # the second sync finds nothing left


def test_every_public_function_repeatedly_from_8_threads_at_once(api_env, monkeypatch):
    import itertools
    import threading
    from contextlib import contextmanager

    from psycopg_pool import ConnectionPool

    import dreaming_dagster as dd
    from dreaming_dagster.process_defaults import default_database
    from dreaming_dagster.retrieval import default_recaller

    # 8 threads share the API's pool of 4 connections. No call may take a second connection of a pool while
    # it holds one: with every connection held by a caller waiting for another, all would wait.
    held, deepest = threading.local(), []
    checkout = ConnectionPool.connection

    @contextmanager
    def counted(pool, *args, **kwargs):
        depth = getattr(held, pool.name, 0) + 1
        setattr(held, pool.name, depth)
        deepest.append(depth)
        try:
            with checkout(pool, *args, **kwargs) as conn:
                yield conn
        finally:
            setattr(held, pool.name, depth - 1)

    monkeypatch.setattr(ConnectionPool, "connection", counted)
    users = itertools.count()

    def one_user_round_trip() -> tuple:
        user = f"user-{next(users)}"
        saved = [dd.save_pairs(user, [pair(n, user_message=f"{user} took up pottery, lesson {n}")]).inserted
                 for n in range(2)]
        synced = dd.sync_user(user)
        found = [dd.recall(user, "pottery lesson", k=5) for _ in range(2)]
        return saved, synced.extraction.get("pairs"), [len(r.memories) for r in found], found[0].memories[0].user_message

    results = run_concurrently(one_user_round_trip, 8)
    assert all(saved == [1, 1] and extracted == 2 and counts == [2, 2] for saved, extracted, counts, _ in results)
    assert len({top.split(" took")[0] for *_, top in results}) == 8  # each thread saw its own user only
    assert default_recaller()._pool.max_size == DreamingSettings().recall_connections  # recalls share a pool
    assert default_database().pool().max_size == DreamingSettings().database_connections == 4  # so do the rest
    assert len(deepest) > 100 and max(deepest) == 1


def test_concurrent_savers_of_shuffled_overlapping_batches_store_each_pair_once(database, embedder16):
    import random

    records = [pair(i, session=f"s{i // 20}", user_message=f"shared {i}") for i in range(240)]

    def saver(seed: int) -> int:
        mine = records[:]
        random.Random(seed).shuffle(mine)
        return sum(save_pairs("alice", mine[start:start + 40], database=database, embedder=embedder16,
                              embed=False).inserted for start in range(0, len(mine), 40))

    database.ensure_schema(embedder16.spec)
    seeds = iter(range(8))
    assert sum(run_concurrently(lambda: saver(next(seeds)), 8)) == 240
    assert count_pairs(database, "alice") == 240


def test_an_embedding_write_that_does_not_take_ends_the_run_instead_of_looping(database, embedder16):
    """A pair still pending after its vectors were written (here a trigger undoes the write) is left for a
    later run and named; the run ends instead of reading the same batch forever."""
    import threading

    from dreaming_dagster.ingest.embedding import embed_pending_pairs

    save_pairs("ann", [pair(1), pair(2)], database=database, embedder=embedder16, embed=False)
    with database.connect() as conn:
        conn.execute("CREATE FUNCTION undo_embedding() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN NEW.embedding := NULL; RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER undo_embedding BEFORE UPDATE ON memory_pairs FOR EACH ROW "
                     "WHEN (NEW.user_message = 'user message 2') EXECUTE FUNCTION undo_embedding()")
    runs: list = []
    embedding = threading.Thread(target=lambda: runs.append(embed_pending_pairs(database, embedder16, "ann")),
                                 daemon=True)
    embedding.start()
    embedding.join(timeout=60)
    assert not embedding.is_alive(), "the embedding stage looped on a pair its write could not finish"
    (run,) = runs
    assert run.embedded == 2 and len(run.failed_pairs) == 1 and "still pending" in run.last_error
    assert user_stats(database, "ann")[0]["pending_embedding"] == 1


# ------------------------------------------------------------------------- 2. old pairs and far as_of
@pytest.mark.parametrize("with_model", [False, True])
def test_very_old_pairs_never_break_recall(database, tmp_path, with_model):
    database.ensure_schema(HashEmbedder.spec)
    dates = ["1970-01-01T00:00:00Z", "1984-06-01T12:00:00Z", "0001-01-01T00:00:00Z", "2024-05-01T00:00:00Z"]
    stored = save_pairs("alice", [pair(i, user_message=f"hiking trip number {i}", occurred_at=d)
                                  for i, d in enumerate(dates)], database=database, embedder=HashEmbedder())
    assert stored.inserted == 4
    path = None
    if with_model:
        path = save_ranker(CompositeRanker(HashEmbedder.spec.dimension, 8), tmp_path / "r.safetensors",
                           embedding_model=HashEmbedder.spec.model)
    recaller = Recaller(database, HashEmbedder(), ranker_path=path)
    for as_of in (None, "9999-12-31", "9999-12-31T23:59:59Z", "0001-01-02T00:00:00Z"):
        result = recaller.recall("alice", "hiking trip", k=10, as_of=as_of)
        for memory in result:
            assert all(math.isfinite(v) and 0 <= v <= 1 for v in memory.signals.values())
    now = recaller.recall("alice", "hiking trip", k=10)
    assert len(now) == 4
    ancient = {m.occurred_at.year: m.signals["rec_exp"] for m in now}
    assert ancient[1] == ancient[1970] == 0.5 ** 1000 and ancient[2024] > ancient[1984]
    for bad in ("9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00"):
        with pytest.raises(InvalidInputError) as error:
            recaller.recall("alice", "hiking", as_of=bad)
        assert error.value.field == "as_of"


def test_cli_recall_rejects_an_unrepresentable_as_of(clean_env, database_url):
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    result = CliRunner().invoke(main, ["recall", "--user", "alice", "--as-of", "9999-12-31T23:59:59-05:00", "x"])
    assert result.exit_code == 2 and "field 'as_of'" in result.output


# -------------------------------------------------------------------- 3. NUL bytes in an LLM's output
def test_a_nul_in_the_llms_reply_is_cleaned_and_blocks_nobody(database, openai_stub, embedder16):
    save_pairs("alice", [pair(i, user_message=f"Lisbon, day {i}") for i in range(6)], database=database,
               embedder=embedder16)
    nul_reply = json.dumps({"summary": "Lis\u0000bon \ud800trip", "subjects": [
        {"name": "Lis\u0000bon", "description": "a\u0000b", "type": "place"}]})
    openai_stub.default_chat_reply = lambda body: nul_reply
    stats = extract_pending(database, OpenAIExtractor(chat_client(openai_stub)), "alice", "default")
    assert (stats.pairs, stats.failures) == (6, 0)
    with database.connect() as conn:
        rows = conn.execute("SELECT summary, extracted_subjects FROM pair_stages").fetchall()
    assert {r["summary"] for r in rows} == {"Lisbon \ufffdtrip"}
    assert {r["extracted_subjects"][0]["name"] for r in rows} == {"Lisbon"}


class _UnstorableExtractor:
    """An extractor (any provider, parsing bypassed) whose result for one pair the database refuses."""

    provider = "unstorable"

    def extract_many(self, pairs, memory=None):
        return [Extraction.model_construct(summary="bad\u0000" if "3" in user else "fine", subjects=[])
                for user, _ in pairs]


def test_a_result_the_database_refuses_fails_only_its_pair(database, embedder16):
    save_pairs("alice", [pair(i) for i in range(6)], database=database, embedder=embedder16)
    stats = extract_pending(database, _UnstorableExtractor(), "alice", "default")
    assert (stats.pairs, stats.failures) == (5, 1)
    with database.connect() as conn:
        failed = conn.execute("SELECT attempts, last_error FROM pair_stages WHERE extracted_at IS NULL").fetchall()
    assert len(failed) == 1 and failed[0]["attempts"] == 1 and "NUL" in failed[0]["last_error"]


# ------------------------------------------------------------------------ 4. an outage parks, not drops
def test_exhausted_pairs_are_parked_counted_retried_after_cooldown_and_resettable(database, openai_stub,
                                                                                   embedder16):
    save_pairs("alice", [pair(i) for i in range(3)], database=database, embedder=embedder16)
    with database.connect() as conn:  # an outage long ago took every attempt of two pairs
        conn.execute("UPDATE pair_stages s SET attempts = %s, last_error = 'APITimeoutError', last_attempt_at = now() "
                     "FROM memory_pairs p WHERE p.id = s.pair_id AND p.turn_index < 2", (MAX_EXTRACTION_ATTEMPTS,))
    openai_stub.default_chat_reply = lambda body: GOOD
    extractor = OpenAIExtractor(chat_client(openai_stub))
    assert extract_pending(database, extractor, "alice", "default").pairs == 1  # parked ones wait
    (stats,) = user_stats(database, "alice")
    assert stats["failed_extraction"] == 2
    check = parked_pairs_check(database, "alice")
    assert not check.passed and check.metadata["parked_pairs"].value == 2
    with database.connect() as conn:
        pending = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params()).fetchall()
        # Only the extracted pair's next stage is work; the parked pairs wait for the cool-down to end.
        assert [(r["user_id"], r["pending"]) for r in pending] == [("alice", 1)]
        conn.execute("UPDATE pair_stages s SET last_attempt_at = now() - interval '7 hours' "
                     "FROM memory_pairs p WHERE p.id = s.pair_id AND p.turn_index = 0")
        pending = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params()).fetchall()
    assert [(r["user_id"], r["pending"]) for r in pending] == [("alice", 2)]
    assert extract_pending(database, extractor, "alice", "default").pairs == 1  # cool-down over: retried
    assert reset_failed_extractions(database, "alice") == 1
    assert extract_pending(database, extractor, "alice", "default").pairs == 1
    assert parked_pairs_check(database, "alice").passed


def test_cli_stats_and_retry_failed(cli_env, database, embedder16):
    save_pairs("alice", [pair(i) for i in range(2)], database=database, embedder=embedder16)
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages SET attempts = 8, last_attempt_at = now()")
    stats = CliRunner().invoke(main, ["stats", "--user", "alice"])
    assert stats.exit_code == 0 and "failed extraction" in stats.output and "retry-failed" in stats.output
    retried = CliRunner().invoke(main, ["retry-failed", "--user", "alice"])
    assert retried.exit_code == 0 and "2 pair(s)" in retried.output
    assert user_stats(database, "alice")[0]["failed_extraction"] == 0


def test_a_provider_outage_stops_the_stage_without_spending_attempts(database, openai_stub, embedder16):
    save_pairs("alice", [pair(i) for i in range(30)], database=database, embedder=embedder16)
    openai_stub.chat_script["main-model"] = [("status", 503)]
    extractor = OpenAIExtractor(chat_client(openai_stub), max_in_flight=2)
    stats = extract_pending(database, extractor, "alice", "default", batch_size=10)
    assert stats.provider_unavailable and stats.pairs == 0
    assert stats.failures <= 2 and stats.failures + stats.not_attempted == 10  # one batch, then it stopped
    assert len(openai_stub.chat_calls()) <= 2 * 2 + 1  # in-flight calls × attempts (+ one json_object probe), not 30 × 2
    with database.connect() as conn:
        spent = conn.execute("SELECT count(*) AS n FROM pair_stages WHERE attempts > 0").fetchone()["n"]
    assert spent == stats.failures


# ---------------------------------------------------------------------- 5. deadlines and retry policy
def test_a_trickling_server_is_cut_at_the_total_deadline(openai_stub):
    openai_stub.chat_script["main-model"] = [("trickle", 0.2)]  # ~200 bytes: ~40 s at this pace
    client = chat_client(openai_stub, attempts_per_model=1, timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(ProviderUnavailableError, match="deadline|timed out|Timeout"):
        client.ask([{"role": "user", "content": "hi"}], Extraction, "x", {})
    assert time.monotonic() - started < 3.5


def test_a_hanging_server_costs_one_deadline(openai_stub):
    openai_stub.chat_script["main-model"] = [("sleep", 6)]
    client = chat_client(openai_stub, attempts_per_model=1, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ProviderUnavailableError):
        client.ask([{"role": "user", "content": "hi"}], Extraction, "x", {})
    assert time.monotonic() - started < 2.5


def test_retry_after_is_honoured(openai_stub):
    openai_stub.chat_script["main-model"] = [("retry_after", 1), ("reply", GOOD)]
    result = chat_client(openai_stub).ask([{"role": "user", "content": "hi"}], Extraction, "x", {})
    first, second = (r["at"] for r in openai_stub.requests)
    assert result.summary and second - first >= 0.95


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried_but_the_fallback_is_tried(openai_stub, status):
    openai_stub.chat_script["main-model"] = [("status", status)]
    openai_stub.chat_script["fallback-model"] = [("reply", GOOD)]
    client = chat_client(openai_stub, fallback_model="fallback-model", attempts_per_model=3)
    assert client.ask([{"role": "user", "content": "hi"}], Extraction, "x", {}).summary
    # 400 and 422 may be the server refusing json_schema: probed once (json_schema again, then json_object);
    # 401/403/404 never are.
    assert len(openai_stub.chat_calls("main-model")) == (3 if status in (400, 422) else 1)
    openai_stub.chat_script["fallback-model"] = [("status", status)]
    with pytest.raises(LLMCallError) as error:
        client.ask([{"role": "user", "content": "hi"}], Extraction, "x", {})
    assert not isinstance(error.value, ProviderUnavailableError)


# -------------------------------------------------------- 6. records that pass validation must store
NOT_STORABLE = [
    ({"metadata": {"score": float("nan")}}, "metadata"),
    ({"metadata": {"score": float("inf")}}, "metadata"),
    ({"metadata": {"k\u0000": 1}}, "metadata"),
    ({"metadata": {"k": "v\u0000"}}, "metadata"),
    ({"metadata": {"deep": json.loads("[" * 40 + "]" * 40)}}, "metadata"),
    ({"session_id": "s\u0000"}, "session_id"),
    ({"session_id": "s\ud800"}, "session_id"),
    ({"user_message": "hi \udcff"}, "user_message"),
    ({"assistant_message": "\ud83d"}, "assistant_message"),
    ({"occurred_at": "0001-01-01T00:00:00+01:00"}, "occurred_at"),
    ({"occurred_at": "9999-12-31T23:59:59-05:00"}, "occurred_at"),
]


def test_unstorable_records_are_rejected_one_by_one(database, embedder16):
    records = [pair(100, user_message="a good one")] + [pair(i, **change) for i, (change, _) in
                                                         enumerate(NOT_STORABLE)]
    result = save_pairs("alice", records, database=database, embedder=embedder16)
    assert result.inserted == 1
    assert [(r.record, r.field) for r in result.rejected] == [(i + 1, f) for i, (_, f) in enumerate(NOT_STORABLE)]
    assert count_pairs(database, "alice") == 1


@pytest.mark.parametrize(("change", "field"), NOT_STORABLE)
def test_strict_mode_refuses_the_batch_naming_the_field(database, embedder16, change, field):
    from dreaming_dagster.ingest.save import BatchRejectedError

    with pytest.raises(BatchRejectedError) as error:
        save_pairs("alice", [pair(1), pair(2, **change)], database=database, embedder=embedder16, strict=True)
    assert error.value.rejections[0].field == field and count_pairs(database, "alice") == 0


@pytest.mark.parametrize("records", [{"session_id": "s"}, pair(1), "not records", 42])
def test_a_batch_that_is_not_a_list_is_refused(database, embedder16, records):
    with pytest.raises(InvalidInputError) as error:
        save_pairs("alice", records, database=database, embedder=embedder16)
    assert error.value.field == "pairs"


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"session_id": "s\u0000"}, "session_id"), ({"query": "caf\udce9"}, "query"),
    ({"query": "x" * 1_000_000}, "query"), ({"session_id": "s" * 300}, "session_id"),
])
def test_recall_rejects_what_it_cannot_read(database, kwargs, field):
    with pytest.raises(InvalidInputError) as error:
        Recaller(database, HashEmbedder()).recall(**({"user_id": "alice", "query": "hello"} | kwargs))
    assert error.value.field == field


# ------------------------------------------------------------------ 7. --strict is all-or-nothing
def jsonl(path, count: int, last: str | None = None):
    lines = [json.dumps(pair(i, user_message=f"line {i}")) for i in range(count)]
    if last is not None:
        lines.append(last)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_strict_ingest_of_a_big_file_with_one_bad_last_line_writes_nothing(cli_env, database, tmp_path):
    path = jsonl(tmp_path / "pairs.jsonl", 300, last='{"session_id": "s", "user_message": "x", '
                 '"occurred_at": "2024-01-01T00:00:00Z", "metadata": {"v": NaN}}')
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice", "--strict", "--defer-embedding"])
    assert result.exit_code == 2 and "line 301" in result.output and "metadata" in result.output
    assert count_pairs(database, "alice") == 0


def test_strict_ingest_rolls_back_earlier_chunks_when_a_later_one_fails(cli_env, database, tmp_path, embedder16):
    database.ensure_schema(embedder16.spec)
    with database.connect() as conn:  # the database refuses one row of the third chunk (of 256)
        conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "IF NEW.user_message = 'line 600' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON memory_pairs FOR EACH ROW EXECUTE FUNCTION refuse()")
    path = jsonl(tmp_path / "pairs.jsonl", 700)
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice", "--strict", "--defer-embedding"])
    assert result.exit_code != 0 and count_pairs(database, "alice") == 0
    assert "nothing was stored" in result.output
    plain = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice", "--defer-embedding"])
    assert plain.exit_code == 1 and "line 601" in plain.output and "refused" in plain.output
    assert count_pairs(database, "alice") == 699  # without --strict, only the refused line is left out


# --------------------------------------------------------------------- 8. malformed files are rejected
def test_jsonl_reader_rejects_bad_lines_and_keeps_the_good_ones(tmp_path):
    good = json.dumps(pair(1)).encode()
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n" + b'{"session_id": "s\xff"}\n' + b'{"n": ' + b"9" * 5000 +
                     b"}\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n" + good.replace(b"1", b"2") + b"\n")
    items = list(read_jsonl(path))
    kinds = [(type(i).__name__, getattr(i, "field", None)) for i in items]
    assert kinds == [("LineRecord", None), ("Rejection", "encoding"), ("Rejection", "json"),
                     ("Rejection", "json"), ("LineRecord", None)]
    assert items[0].where == "line 1" and "nested" in items[3].reason


def test_cli_ingest_of_a_non_utf8_file_stores_the_valid_lines(cli_env, database, tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(pair(1)).encode() + b"\n" + "caf\u00e9".encode("latin-1") + b"\n" +
                     json.dumps(pair(2)).encode() + b"\n")
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice", "--defer-embedding"])
    assert result.exit_code == 1 and "line 2" in result.output and "encoding" in result.output
    assert count_pairs(database, "alice") == 2


def longmemeval_question(n: int) -> dict:
    return {"question_id": f"q{n}", "haystack_session_ids": [f"s{n}"], "haystack_dates": ["2023/04/10 (Mon) 17:50"],
            "haystack_sessions": [[{"role": "user", "content": f"hello {n}"},
                                   {"role": "assistant", "content": "hi"}]]}


def test_longmemeval_reader_reports_truncation_and_wrong_shapes(tmp_path):
    text = json.dumps([longmemeval_question(1), longmemeval_question(2)])
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: text.index('"q2"') + 10], encoding="utf-8")
    items = list(read_longmemeval(truncated))
    assert [type(i).__name__ for i in items] == ["LineRecord", "Rejection"]
    assert items[-1].record == "file" and "unreadable after question 1" in items[-1].reason
    top_object = tmp_path / "object.json"
    top_object.write_text(json.dumps({"questions": []}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="top level must be a JSON array"):
        list(iter_longmemeval_questions(top_object))
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps([7, {"question_id": "q", "haystack_sessions": [["x"]], "haystack_session_ids": ["s"],
                                   "haystack_dates": ["2023/04/10 (Mon) 17:50"]}, longmemeval_question(3)]))
    items = list(read_longmemeval(odd))
    assert [(type(i).__name__, getattr(i, "field", None)) for i in items] == [
        ("Rejection", "question"), ("Rejection", "haystack_sessions"), ("LineRecord", None)]


def test_cli_longmemeval_object_file_fails_clearly(cli_env, database, tmp_path):
    path = tmp_path / "object.json"
    path.write_text(json.dumps({"questions": []}), encoding="utf-8")
    result = CliRunner().invoke(main, ["ingest-longmemeval", str(path), "--user", "alice", "--defer-embedding"])
    assert result.exit_code == 1 and "top level must be a JSON" in result.output


# ------------------------------------------------------------------------------------ 9. consolidation
class Scripted:
    provider = "scripted"

    def __init__(self, mutations, summary="scripted"):
        self.mutations, self.summary = mutations, summary

    def propose(self, pass_input):
        return Proposal(mutations=self.mutations, summary=self.summary)


def live_subject(database, name: str) -> str:
    from tests.retrieval_fixtures import text_vector

    with database.connect() as conn:
        return str(conn.execute(reference_sql("insert_subject"), {
            "user_id": "alice", "kg_id": "default", "subject_text": name, "description_text": "",
            "subject_type": "other", "embedding": text_vector(name), "seen_at": datetime(2026, 1, 1, tzinfo=UTC),
        }).fetchone()["id"])


def passes(database) -> list[dict]:
    with database.connect() as conn:
        return conn.execute("SELECT status, mutations, error FROM dreaming_passes ORDER BY started_at").fetchall()


def test_non_object_mutations_are_skipped_and_the_rest_applies(database):
    database.ensure_schema(HashEmbedder.spec)
    keep = live_subject(database, "Lisbon Trip")
    mutations = [42, "rename everything", None, [1], {"op": "rename_subject", "subject": keep, "name": "Lis\u0000bon"}]
    report = run_pass(database, HashEmbedder(), Scripted(mutations, summary="nul \u0000 summary"), "alice",
                      mode="incremental", force=True)
    assert report.status == "applied" and report.count("applied") == 1 and len(report.rejected) == 4
    with database.connect() as conn:
        assert conn.execute("SELECT subject_text FROM subjects WHERE id = %s", (keep,)).fetchone()["subject_text"] == "Lisbon"
    (audit,) = passes(database)
    assert audit["status"] == "applied" and len(audit["mutations"]) == 5


def test_a_failed_pass_with_unstorable_text_still_leaves_its_audit_row(database, monkeypatch):
    from dreaming_dagster.consolidation import passes as passes_module

    database.ensure_schema(HashEmbedder.spec)
    keep = live_subject(database, "Porto")

    def failing_apply(conn, report, embeddings, policy, now):
        raise RuntimeError("disk full \u0000 while applying")

    monkeypatch.setattr(passes_module, "_apply", failing_apply)
    with pytest.raises(PassFailedError):
        run_pass(database, HashEmbedder(), Scripted([{"op": "update_description", "subject": keep,
                                                      "description": "a\u0000b"}], summary="s\u0000"),
                 "alice", mode="incremental", force=True)
    (audit,) = passes(database)
    assert audit["status"] == "failed" and "disk full" in audit["error"] and "\x00" not in audit["error"]


# ---------------------------------------------------------------- 10. a bulk insert across many users
def test_one_statement_can_insert_pairs_for_ten_thousand_users(database):
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        conn.execute("""
            INSERT INTO memory_pairs (user_id, session_id, turn_index, user_message, assistant_message,
                                      occurred_at, token_count, content_hash)
            SELECT 'bulk-' || (n / 2), 's', n % 2, 'walked the dog ' || n, 'nice', now(), 5, md5(n::text)
            FROM generate_series(0, 19999) AS n""")
        users = conn.execute("SELECT count(*) AS n FROM lexical_corpora").fetchone()["n"]
        postings = conn.execute("SELECT count(*) AS n FROM pair_words").fetchone()["n"]
    assert users == 10_000 and postings == 20_000


def test_a_provider_that_fails_leaves_a_failed_audit_row_and_nothing_applied(database):
    database.ensure_schema(HashEmbedder.spec)
    keep = live_subject(database, "Porto")

    class Down:
        provider = "openai"

        def propose(self, pass_input):
            raise ProviderUnavailableError("every attempt failed")

    with pytest.raises(PassFailedError):
        run_pass(database, HashEmbedder(), Down(), "alice", mode="incremental", force=True)
    (audit,) = passes(database)
    assert audit["status"] == "failed" and "every attempt failed" in audit["error"] and audit["mutations"] == []
    with database.connect() as conn:
        assert conn.execute("SELECT subject_text FROM subjects WHERE id = %s", (keep,)).fetchone()["subject_text"] == "Porto"
