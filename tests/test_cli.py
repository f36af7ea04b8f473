"""The `dreaming` command line, in-process through click's runner, on a real database."""

import json

from click.testing import CliRunner

from dreaming_dagster.cli import main
from tests.conftest import pair, reference_sql


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def count(database, user_id):
    with database.connect() as conn:
        return conn.execute("SELECT count(*) AS n FROM memory_pairs WHERE user_id = %s", (user_id,)).fetchone()["n"]


def test_ingest_jsonl_per_record(cli_env, database, tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [json.dumps(pair(1)), "{broken", json.dumps(pair(2)),
                                                  json.dumps(pair(3, occurred_at="soon"))])
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice"])
    assert result.exit_code == 1  # some records were rejected: scripts can tell
    assert "inserted 2" in result.output
    assert "line 2: field 'json'" in result.output
    assert "line 4: field 'occurred_at'" in result.output
    assert count(database, "alice") == 2
    again = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice"])
    assert "inserted 0 · duplicates 2" in again.output and count(database, "alice") == 2


def test_ingest_strict_writes_nothing(cli_env, database, tmp_path):
    first = write_jsonl(tmp_path / "first.jsonl", [json.dumps(pair(0))])
    assert CliRunner().invoke(main, ["ingest", str(first), "--user", "alice"]).exit_code == 0
    path = write_jsonl(tmp_path / "pairs.jsonl", [json.dumps(pair(1)), json.dumps(
        pair(2, user_message="", assistant_message=""))])
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "alice", "--strict"])
    assert result.exit_code == 2
    assert "line 2: field 'user_message'" in result.output
    assert count(database, "alice") == 1  # the valid line 1 was not stored either
    # A key twice in one line (json would keep the last value silently) is refused, naming the key.
    twice = write_jsonl(tmp_path / "twice.jsonl", [json.dumps(pair(3)), json.dumps(pair(4))[:-1] + ', "user_message": "x"}'])
    result = CliRunner().invoke(main, ["ingest", str(twice), "--user", "alice", "--strict"])
    assert result.exit_code == 2 and "line 2: field 'user_message'" in result.output and "twice" in result.output
    assert count(database, "alice") == 1
    loose = CliRunner().invoke(main, ["ingest", str(twice), "--user", "alice"])
    assert "inserted 1" in loose.output and "line 2: field 'user_message'" in loose.output


def test_ingest_bad_user_names_the_field(cli_env, tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [json.dumps(pair(1))])
    result = CliRunner().invoke(main, ["ingest", str(path), "--user", "not a valid id"])
    assert result.exit_code == 2 and "field 'user_id'" in result.output


def test_ingest_longmemeval_and_stats(cli_env, database, tmp_path):
    questions = [{"question_id": "q1", "haystack_session_ids": ["s1"], "haystack_dates": ["2023/05/01 (Mon) 10:00"],
                  "haystack_sessions": [[{"role": "user", "content": "I moved to Lisbon", "has_answer": True},
                                         {"role": "assistant", "content": "Nice city!"},
                                         {"role": "user", "content": "Any tips?"},
                                         {"role": "assistant", "content": "Try the trams."}]]}]
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(questions), encoding="utf-8")
    result = CliRunner().invoke(main, ["ingest-longmemeval", str(path), "--user", "bench", "--defer-embedding"])
    assert result.exit_code == 0, result.output
    assert "inserted 2" in result.output and "embedding pending 2" in result.output
    with database.connect() as conn:
        labels = [r["metadata"]["has_answer"] for r in conn.execute(
            "SELECT metadata FROM memory_pairs ORDER BY turn_index")]
    assert labels == [True, False]
    stats = CliRunner().invoke(main, ["stats", "--user", "bench"])
    assert stats.exit_code == 0 and "default" in stats.output and "dated" in stats.output


def test_recall_prints_a_table_or_json_and_names_bad_fields(cli_env, tmp_path):
    from dreaming_dagster.retrieval.signals import SIGNAL_NAMES

    cli_env.setenv("DREAMING_RANKER_MODEL_PATH", str(tmp_path / "no-model-yet.safetensors"))
    path = write_jsonl(tmp_path / "pairs.jsonl", [json.dumps(pair(n)) for n in range(6)])
    assert CliRunner().invoke(main, ["ingest", str(path), "--user", "alice"]).exit_code == 0
    table = CliRunner().invoke(main, ["recall", "--user", "alice", "-k", "3", "user message 2"])
    assert table.exit_code == 0, table.output
    # Without a model only cos carries weight: the table shows it (the JSON below has every signal).
    assert "recall for alice" in table.output and "cos" in table.output and "cosine" in table.output
    assert "density" not in table.output
    assert "user message" in table.output and "2024-03-" in table.output  # the memories themselves
    dated = CliRunner().invoke(main, ["recall", "--user", "alice", "--as-of", "2024-04-02T00:00:00Z",
                                      "user message 2 last month"])
    assert dated.exit_code == 0 and "time: last month → 1–31 March 2024" in dated.output, dated.output
    as_json = CliRunner().invoke(main, ["recall", "--user", "alice", "-k", "3", "--json", "--session", "s1",
                                        "user message 2"])
    payload = json.loads(as_json.output)
    assert len(payload["memories"]) == 3 and payload["weights"]["cos"] == 1.0
    assert set(payload["memories"][0]["signals"]) == set(SIGNAL_NAMES)
    assert all(m["signals"]["sess"] == 1.0 for m in payload["memories"])  # every pair is in session s1
    bad = CliRunner().invoke(main, ["recall", "--user", "alice", "-k", "0", "x"])
    assert bad.exit_code == 2 and "field 'k'" in bad.output
    bad_time = CliRunner().invoke(main, ["recall", "--user", "alice", "--as-of", "soonish", "x"])
    assert bad_time.exit_code == 2 and "field 'as_of'" in bad_time.output
    nobody = CliRunner().invoke(main, ["recall", "--user", "nobody", "x"])
    assert nobody.exit_code == 0 and "nobody has no memories" in nobody.output


def test_dream_status_trigger_and_restore(cli_env, database, tmp_path):
    from dreaming_dagster.embeddings import EmbeddingSpec

    path = write_jsonl(tmp_path / "pairs.jsonl", [json.dumps(pair(n)) for n in range(3)])
    assert CliRunner().invoke(main, ["ingest", str(path), "--user", "alice"]).exit_code == 0
    database.ensure_schema(EmbeddingSpec("stub-embed-16", 16))
    with database.connect() as conn:
        junk = conn.execute(reference_sql("insert_subject"), {
            "user_id": "alice", "kg_id": "default", "subject_text": "lives with", "description_text": "",
            "subject_type": "other", "embedding": None, "seen_at": "2024-03-01T00:00:00Z"}).fetchone()["id"]
    status = CliRunner().invoke(main, ["dream", "status", "--user", "alice"])
    assert status.exit_code == 0 and "of 100,000 tokens since the last pass" in status.output
    assert "last pass never" in status.output
    trigger = CliRunner().invoke(main, ["dream", "trigger", "--user", "alice", "--compact"])
    assert trigger.exit_code == 0, trigger.output
    assert "Archived" in trigger.output and "lives with" in trigger.output
    after = CliRunner().invoke(main, ["dream", "status", "--user", "alice"])
    assert "0 of 100,000 tokens" in after.output and "compact" in after.output and "offline" in after.output
    restore = CliRunner().invoke(main, ["dream", "restore", "--user", "alice", str(junk)])
    assert restore.exit_code == 0 and "restored 'lives with'" in restore.output
    again = CliRunner().invoke(main, ["dream", "restore", "--user", "alice", str(junk)])
    assert again.exit_code == 2 and "not an archived subject" in again.output
    bad = CliRunner().invoke(main, ["dream", "status", "--user", "no spaces"])
    assert bad.exit_code == 2 and "field 'user_id'" in bad.output
