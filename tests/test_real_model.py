"""The LLM path against a real model: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

Not part of ``make test`` (the server is a source build): ``make test-llm`` installs it and runs this file.
A user is dreamed from fresh processes, the way the CLI is used, with the primary model's endpoint dead and
the fallback model on the local server; what is checked is what a user would: every pair through every stage
once, only valid and grounded rows, nothing half-stored after a killed run, the consolidation pass audited.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.extraction.grounding import TextWords, is_grounded
from dreaming_dagster.llm.client import JSONChatClient, LLMCallError, chat_client
from dreaming_dagster.llm.local_server import LocalChatServer
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.pipeline.refiners import OpenAIRefiner
from tests.conftest import PROJECT_ROOT, free_port

pytestmark = pytest.mark.real_model
DREAMING = str(PROJECT_ROOT / ".venv" / "bin" / "dreaming")

EXCHANGES = [
    ("My dog Biscuit chewed my running shoes again this morning.", "Puppies chew when bored; Biscuit may need more walks."),
    ("I'm training for the Porto half marathon in October.", "Porto's course is flat along the Douro; good for a first half."),
    ("Biscuit and I ran five kilometres by the river today.", "A dog is a great running partner. How did Biscuit do?"),
    ("My sister Dana is visiting from Lisbon next weekend.", "Lovely! Will Dana join you for a run?"),
    ("I bought new Asics running shoes after Biscuit ate the old ones.", "Asics are a solid choice for half marathon training."),
    ("Dana wants to run the Porto half marathon with me.", "Training together helps; plan long runs on weekends."),
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LocalChatServer(log_path=log) as server:
        yield server


@pytest.fixture
def llm_env(cli_env, llama):
    """The settings of a deployment whose hosted model is down: nothing listens at the primary's endpoint,
    the fallback model is the local server."""
    for name, value in {"DREAMING_LLM_MODEL": "hosted-model",
                        "DREAMING_LLM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
                        "DREAMING_LLM_FALLBACK_MODEL": "smollm2",
                        "DREAMING_LLM_FALLBACK_BASE_URL": llama.base_url,
                        "DREAMING_LLM_ATTEMPTS_PER_MODEL": "2", "DREAMING_LLM_BACKOFF_SECONDS": "0",
                        "DREAMING_LLM_TIMEOUT_SECONDS": "180", "DREAMING_DREAM_MAX_INPUT_TOKENS": "2000"}.items():
        cli_env.setenv(name, value)
    return cli_env


def dreaming(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([DREAMING, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def stages(database, user: str) -> list[dict]:
    with database.connect() as conn:
        return conn.execute("SELECT p.user_message, p.assistant_message, s.* FROM pair_stages s "
                            "JOIN memory_pairs p ON p.id = s.pair_id WHERE s.user_id = %s ORDER BY p.turn_index",
                            (user,)).fetchall()


def test_a_user_dreamed_through_a_real_model_with_the_primary_down(llm_env, database, tmp_path):
    records = tmp_path / "maya.jsonl"
    records.write_text("".join(json.dumps({"session_id": f"s{n // 2}", "user_message": user, "assistant_message": reply,
                                           "occurred_at": f"2024-05-{n + 1:02d}T08:00:00Z", "turn_index": n}) + "\n"
                               for n, (user, reply) in enumerate(EXCHANGES)))
    assert dreaming("ingest", str(records), "--user", "maya").returncode == 0

    # A sync killed while it extracts leaves whole rows or none; the next one finishes the rest.
    first = subprocess.Popen([DREAMING, "sync", "--user", "maya"], env=dict(os.environ), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while first.poll() is None and time.monotonic() < deadline:
        if any(row["extracted_at"] for row in stages(database, "maya")):
            break
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    synced = dreaming("sync", "--user", "maya")
    assert synced.returncode == 0, synced.stderr[-2000:]

    rows = stages(database, "maya")
    assert len(rows) == len(EXCHANGES)
    for row in rows:  # every pair through every stage, its extraction stored once, no error left behind
        assert row["kg_stored_at"] and row["extracted_at"] and row["dated_at"] and row["keyed_at"], json.dumps(dict(row), default=str)
        assert row["attempts"] == 1 and row["last_error"] is None, json.dumps(dict(row), default=str)
        assert isinstance(row["extracted_subjects"], list)
    health = graph_reports.graph_health(database, "maya")
    assert set(health.values()) == {0}, health
    assert graph_reports.memory_count_drift(database, "maya") == []

    with database.connect() as conn:
        subjects = conn.execute(
            "SELECT s.subject_text, s.description_text, array_agg(p.user_message || ' ' || p.assistant_message) AS texts "
            "FROM subjects s JOIN subject_memory_pair_links l ON l.subject_id = s.id "
            "JOIN memory_pairs p ON p.id = l.pair_id WHERE s.user_id = 'maya' AND s.archived_at IS NULL "
            "GROUP BY s.id").fetchall()
        keys = conn.execute("SELECT pair_id, kind, position, count(*) AS n FROM memory_keys WHERE user_id = 'maya' "
                            "GROUP BY 1, 2, 3 HAVING count(*) > 1").fetchall()
    assert keys == []
    # Nothing the conversation did not say, judged apart from the rule the extractor filters by (which keeps a
    # name when half its words are in the pair): every word of a name, read in its pairs alone (not in the
    # model's own description), by a plain prefix match: every name.
    assert subjects
    unsaid = [s["subject_text"] for s in subjects if not every_word_said(s["subject_text"], s["texts"])]
    assert unsaid == []

    # A consolidation pass through the same endpoints: audited whatever the small model proposes.
    dreamed = dreaming("dream", "trigger", "--user", "maya", "--force")
    with database.connect() as conn:
        passes = conn.execute("SELECT * FROM dreaming_passes WHERE user_id = 'maya'").fetchall()
    assert len(passes) == 1 and passes[0]["provider"] == "openai", dreamed.stderr[-2000:]
    audit = passes[0]
    if audit["status"] == "failed":  # the pass failed as a whole: nothing applied, the reason kept
        assert dreamed.returncode != 0 and audit["error"] and audit["applied"] == 0
    else:
        assert dreamed.returncode == 0, dreamed.stderr[-2000:]
        outcomes = audit["mutations"]
        assert audit["applied"] == sum(o["status"] == "applied" for o in outcomes)
        assert all(o["reason"] for o in outcomes if o["status"] == "skipped")
    assert set(graph_reports.graph_health(database, "maya").values()) == {0}


NOT_CONTENT = frozenset(["a", "an", "the", "of", "and", "or", "for", "to", "in", "on", "at", "with", "my",
                         "your", "our", "his", "her", "their", "its"])


def every_word_said(name: str, texts: list[str]) -> bool:
    """Whether each word of ``name`` (but a, the, of …) begins a word of ``texts`` (its first letters, all but
    a plural or verb ending): "Running Shoe" in "my running shoes"."""
    spoken = re.findall(r"[a-z0-9]+", " ".join(texts).lower())
    words = [w for w in re.findall(r"[a-z0-9]+", name.lower()) if w not in NOT_CONTENT]
    return bool(words) and all(any(token.startswith(w[:max(3, len(w) - 2)]) for token in spoken) for w in words)


def test_refinement_through_the_real_model_keeps_names_the_pairs_say(llm_env):
    refiner = OpenAIRefiner(chat_client(DreamingSettings()), max_in_flight=2)
    said = {"Biscuit": " ".join(f"{u} {a}" for u, a in EXCHANGES if "Biscuit" in u),
            "Porto Half Marathon": " ".join(f"{u} {a}" for u, a in EXCHANGES if "Porto" in u)}
    drawers = [("Biscuit", "the user's dog | chewed the running shoes | ran five kilometres by the river",
                said["Biscuit"]),
               ("Porto Half Marathon", "the user trains for it in October | Dana wants to run it too",
                said["Porto Half Marathon"])]
    for (name, _, text), refined in zip(drawers, refiner.refine_many(drawers), strict=True):
        assert not isinstance(refined, Exception), refined
        assert refined.narrative and " | " not in refined.narrative
        assert is_grounded(refined.name, TextWords.of(name, text)), refined


def test_the_real_server_refuses_json_schema_and_cut_replies_are_never_parsed(llama):
    client = JSONChatClient(model="smollm2", base_url=llama.base_url, api_key=None, max_tokens=4,
                            attempts_per_model=1, backoff_s=0.0, timeout_s=120)
    refiner = OpenAIRefiner(client)
    with pytest.raises(LLMCallError, match="cut at the token limit \\(8 tokens\\)"):
        refiner.refine("Biscuit", "the user's dog | chews shoes", "My dog Biscuit chews shoes.")
    # The server answered 500 to json_schema; the client found json_object and keeps to it.
    assert client.output_formats() == [("smollm2", "json_object")]
