"""The openai extraction path, through the real openai client against a local chat-completions stub."""

import json

import numpy as np
import pytest

from dreaming_dagster.extraction.extractors import OfflineExtractor, OpenAIExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.llm.client import JSONChatClient, LLMCallError
from dreaming_dagster.pipeline.extracting import extract_pending
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from tests.conftest import pair

GOOD = json.dumps({"summary": "User plans a Lisbon trip.", "subjects": [
    {"name": "Lisbon", "description": "trip in June", "type": "place"},
    {"name": "Sister Dana", "description": "travels along", "type": "person"}]})
LISBON = ("I'm going to Lisbon with my sister Dana in June", "Fun!")  # the pair GOOD's subjects are grounded in


def extractor(stub, attempts=2, timeout_s=10.0, fallback="fallback-model"):
    client = JSONChatClient(model="main-model", fallback_model=fallback, base_url=stub.base_url, api_key="k",
                            attempts_per_model=attempts, backoff_s=0.0, timeout_s=timeout_s)
    return OpenAIExtractor(client, max_in_flight=5)


def test_structured_output_request(openai_stub):
    openai_stub.chat_script["main-model"] = [("reply", GOOD)]
    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", temperature=0.35,
                            max_tokens=321, attempts_per_model=1, backoff_s=0.0)
    result = OpenAIExtractor(client).extract("I'm going to Lisbon with my sister Dana", "Fun!")
    assert [s.name for s in result.subjects] == ["Lisbon", "Sister Dana"]
    (call,) = openai_stub.chat_calls()
    assert call["temperature"] == 0.35 and call["max_tokens"] == 321  # what the client is given goes out
    assert call["response_format"]["type"] == "json_schema"
    assert call["response_format"]["json_schema"]["schema"]["properties"]["subjects"]["maxItems"] == 5


@pytest.mark.parametrize("reply", [
    f"Here you go:\n{GOOD}\nAnything else?",
    f"<think>Lisbon {{trip}} matters</think>{GOOD}",
    GOOD.replace("trip in June", "trip\nin June"),
])
def test_messy_but_valid_replies_parse_first_time(openai_stub, reply):
    openai_stub.chat_script["main-model"] = [("reply", reply)]
    assert extractor(openai_stub).extract(*LISBON).subjects[0].name == "Lisbon"
    assert len(openai_stub.chat_calls()) == 1


@pytest.mark.parametrize("bad_step", [
    ("reply", '{"summary": "trunc'),                        # truncated JSON
    ("reply", '{"summary": "s", "subjects": "Lisbon"}'),    # wrong types
    ("reply", "I cannot help with that."),                 # no JSON
    ("status", 500),                                       # server error
])
def test_failures_retry_then_use_the_fallback_model(openai_stub, bad_step):
    openai_stub.chat_script["main-model"] = [bad_step]
    openai_stub.chat_script["fallback-model"] = [("reply", GOOD)]
    result = extractor(openai_stub).extract(*LISBON)
    assert result.subjects[0].name == "Lisbon"
    # A json_schema request failing with a 500 is probed once: asked again, then as json_object; both fail
    # (an outage, not a refusal), so the next attempt is an error as any other.
    probe = 2 if bad_step[0] == "status" else 0
    assert len(openai_stub.chat_calls("main-model")) == 2 + probe and len(openai_stub.chat_calls("fallback-model")) == 1


def test_timeouts_fall_back(openai_stub):
    openai_stub.chat_script["main-model"] = [("sleep", 3)]
    openai_stub.chat_script["fallback-model"] = [("reply", GOOD)]
    assert extractor(openai_stub, attempts=1, timeout_s=0.5).extract(*LISBON).summary


def test_seven_subjects_are_cut_to_five(openai_stub):
    seven = json.dumps({"summary": "s", "subjects": [{"name": f"Topic {i}", "description": "", "type": "topic"}
                                                     for i in range(7)]})
    openai_stub.chat_script["main-model"] = [("reply", seven)]
    assert len(extractor(openai_stub).extract("Topics 0, 1, 2, 3, 4, 5 and 6", "").subjects) == 5


def test_servers_without_json_schema_get_json_object(openai_stub):
    openai_stub.chat_script["main-model"] = [("reject_schema", None)]
    openai_stub.default_chat_reply = lambda body: GOOD
    x = extractor(openai_stub)
    assert x.extract(*LISBON).subjects and x.extract(*LISBON).subjects
    formats = [c["response_format"]["type"] for c in openai_stub.chat_calls()]
    assert formats == ["json_schema", "json_schema", "json_object", "json_object"]  # refused twice, remembered


def test_a_server_refusing_json_schema_with_a_500_gets_json_object_with_the_schema(openai_stub):
    """llama.cpp's server answers json_schema with HTTP 500 (a validation error): that is a refusal of the
    format, not an outage — the same request as json_object answers, and is used from then on."""
    openai_stub.chat_script["main-model"] = [("reject_schema", 500)]
    openai_stub.default_chat_reply = lambda body: GOOD
    x = extractor(openai_stub)
    assert x.extract(*LISBON).subjects and x.extract(*LISBON).subjects
    calls = openai_stub.chat_calls()
    assert [c["response_format"]["type"] for c in calls] == ["json_schema", "json_schema", "json_object", "json_object"]
    assert all("properties" in c["response_format"]["schema"] for c in calls[2:])


def test_a_real_outage_during_json_schema_is_not_taken_for_a_refusal(openai_stub):
    openai_stub.chat_script["main-model"] = [("status", 500)]
    openai_stub.chat_script["fallback-model"] = [("status", 500)]
    x = extractor(openai_stub)
    with pytest.raises(LLMCallError):
        x.extract(*LISBON)
    openai_stub.chat_script["main-model"] = [("reply", GOOD)]
    assert x.extract(*LISBON).subjects
    assert openai_stub.chat_calls()[-1]["response_format"]["type"] == "json_schema"  # still asked for


def test_an_outage_during_the_probe_decides_nothing_and_a_later_refusal_probes_again(openai_stub, monkeypatch):
    """llama.cpp's server answers 503 while it loads its model: a probe that meets it decides nothing, and once
    the server refuses json_schema (500) twice and answers json_object, json_object is used from then on."""
    from dreaming_dagster.llm import client as client_module

    monkeypatch.setattr(client_module, "PROBE_COOLDOWN_S", 0.0)
    openai_stub.chat_script["main-model"] = [("reject_schema", 500), ("status", 503), ("reject_schema", 500)]
    openai_stub.default_chat_reply = lambda body: GOOD
    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", attempts_per_model=3,
                            backoff_s=0.0)
    assert OpenAIExtractor(client).extract(*LISBON).subjects
    assert client.output_formats() == [("main-model", "json_object")]
    assert OpenAIExtractor(client).extract(*LISBON).subjects
    assert openai_stub.chat_calls()[-1]["response_format"]["type"] == "json_object"


def test_one_transient_error_never_downgrades_a_server_that_takes_json_schema(openai_stub):
    openai_stub.chat_script["main-model"] = [("status", 500), ("reply", GOOD)]
    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", attempts_per_model=3,
                            backoff_s=0.0)
    assert OpenAIExtractor(client).extract(*LISBON).subjects
    assert OpenAIExtractor(client).extract(*LISBON).subjects
    assert client.output_formats() == [("main-model", "json_schema")]
    assert {c["response_format"]["type"] for c in openai_stub.chat_calls()} == {"json_schema"}


def test_a_reply_cut_at_the_token_limit_is_asked_again_with_twice_the_limit(openai_stub):
    openai_stub.chat_script["main-model"] = [("cut_below", 1000)]
    openai_stub.default_chat_reply = lambda body: GOOD
    x = extractor(openai_stub)  # max_tokens 800: cut; 1,600: whole
    assert x.extract(*LISBON).subjects
    assert [c["max_tokens"] for c in openai_stub.chat_calls()] == [800, 1600]


def test_a_reply_cut_twice_is_never_stored_half(openai_stub):
    openai_stub.chat_script["main-model"] = [("cut_below", 10**6)]
    openai_stub.chat_script["fallback-model"] = [("cut_below", 10**6)]
    openai_stub.default_chat_reply = lambda body: GOOD
    with pytest.raises(LLMCallError, match="cut at the token limit"):
        extractor(openai_stub, attempts=1).extract(*LISBON)


def test_everything_failing_raises_a_clear_error(openai_stub):
    openai_stub.chat_script["main-model"] = [("status", 500)]
    openai_stub.chat_script["fallback-model"] = [("status", 503)]
    with pytest.raises(LLMCallError, match="2 model"):
        extractor(openai_stub).extract(*LISBON)


def test_a_failing_pair_is_recorded_and_retried_later_without_blocking_others(database, openai_stub, embedder16):
    save_pairs("alice", [pair(i, user_message=f"msg {i}") for i in range(4)] +
               [pair(9, user_message="POISON msg")], database=database, embedder=embedder16)
    openai_stub.default_chat_reply = lambda body: (
        "not json" if "POISON" in body["messages"][1]["content"] else GOOD)
    stats = extract_pending(database, extractor(openai_stub), "alice", "default")
    assert (stats.pairs, stats.failures) == (4, 1)
    with database.connect() as conn:
        failed = conn.execute("SELECT s.attempts, s.last_error, s.extracted_at FROM memory_pairs p "
                              "JOIN pair_stages s ON s.pair_id = p.id WHERE p.user_message LIKE 'POISON%%'").fetchone()
        done = conn.execute("SELECT count(*) AS n FROM pair_stages WHERE extracted_at IS NOT NULL").fetchone()
    assert failed["attempts"] == 1 and "LLMCallError" in failed["last_error"] and failed["extracted_at"] is None
    assert done["n"] == 4
    openai_stub.default_chat_reply = lambda body: GOOD  # the endpoint recovers: the next run picks it up
    assert extract_pending(database, extractor(openai_stub), "alice", "default").pairs == 1


def test_the_llms_facts_become_the_pairs_fact_keys_replaced_on_a_new_extraction(database, openai_stub, embedder16):
    from dreaming_dagster.extraction.schema import MAX_FACTS, Extraction
    from dreaming_dagster.memory.export import export_lines, import_records

    # Blank, repeated and overlong facts are dropped and at most MAX_FACTS kept, never failing the pair.
    parsed = Extraction.model_validate({"summary": "s", "subjects": [], "facts": [
        " I prefer  window seats. ", "", "I prefer window seats.", "x" * 301, *[f"I own {n} bikes." for n in range(9)]]})
    assert parsed.facts[0] == "I prefer window seats." and len(parsed.facts) == MAX_FACTS

    save_pairs("alice", [pair(0, user_message="I prefer window seats and my sister Dana lives in Porto."),
                         pair(1, user_message="Tell me a joke.")], database=database, embedder=embedder16)
    facts = ["I prefer window seats.", "My sister Dana lives in Porto."]
    openai_stub.default_chat_reply = lambda body: json.dumps(
        {"summary": "s", "subjects": [], "facts": facts if "window" in body["messages"][1]["content"] else []})
    stats = extract_pending(database, extractor(openai_stub), "alice", "default", embedder=embedder16)
    assert (stats.pairs, stats.facts) == (2, 2)
    assert "facts" in openai_stub.chat_calls()[0]["response_format"]["json_schema"]["schema"]["properties"]

    def fact_keys(user_id):
        with database.connect() as conn:
            return [(r["position"], r["key_text"], list(r["embedding"].to_numpy().round(4))) for r in conn.execute(
                "SELECT position, key_text, embedding FROM memory_keys WHERE user_id = %s AND kind = 'fact' "
                "ORDER BY position", (user_id,))]

    assert [(p, t) for p, t, _ in fact_keys("alice")] == [(0, facts[0]), (1, facts[1])]
    assert fact_keys("alice")[0][2] == list(np.asarray(embedder16.embed([facts[0]])[0], dtype=np.float32).round(4))
    # Extracted again (a rebuild), the pair holds only its latest facts.
    facts = ["I prefer aisle seats now."]
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages SET extracted_at = NULL WHERE user_id = 'alice'")
    assert extract_pending(database, extractor(openai_stub), "alice", "default", embedder=embedder16).facts == 1
    assert [t for _, t, _ in fact_keys("alice")] == facts
    # Fact keys travel in an export like the others.
    lines = list(export_lines("alice", database=database))
    import_records([(f"line {n}", json.loads(line)) for n, line in enumerate(lines, 1)], "bob", database=database,
                   embedder=embedder16)
    assert fact_keys("bob") == fact_keys("alice")
    # Imported with the pairs' embedding deferred, they still come along (no stage would extract them again).
    import_records([(f"line {n}", json.loads(line)) for n, line in enumerate(lines, 1)], "carol", database=database,
                   embedder=embedder16, embed=False)
    assert fact_keys("carol") == fact_keys("alice")


def test_an_import_calls_the_model_before_it_holds_the_word_index_lock(database, openai_stub, embedder16):
    """An import's transaction holds the word index's lock (one of 256 buckets, shared with other users) from
    its first insert: every vector — pairs', subjects', keys' — is computed before it."""
    from dreaming_dagster.memory.export import export_lines, import_records

    records = [pair(n, session=f"s{n // 100}", user_message=f"I bought {n} red bikes for my sister Dana.")
               for n in range(300)]  # more than one chunk of the import
    save_pairs("alice", records, database=database, embedder=embedder16)
    sync_user("alice", database=database, embedder=embedder16, extractor=OfflineExtractor(),
              refiner=OfflineRefiner())
    lines = list(export_lines("alice", database=database))
    held_while_embedding: list[int] = []

    class Watched(type(embedder16)):
        def embed(self, texts):
            with database.connect(vectors=False) as conn:
                held_while_embedding.append(conn.execute(
                    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid = word_index_lock_class()::oid").fetchone()["n"])
            return super().embed(texts)

    watched = Watched(model="stub-embed-16", dimension=16, base_url=openai_stub.base_url, api_key="test",
                      batch_size=64, max_retries=0, timeout_s=10)
    imported = import_records([(f"line {n}", json.loads(line)) for n, line in enumerate(lines, 1)], "bob",
                              database=database, embedder=watched)
    assert imported.saved.inserted == 300 and imported.graph_imported
    assert held_while_embedding and set(held_while_embedding) == {0}


def test_what_the_pair_does_not_say_is_dropped_and_the_rest_kept(openai_stub, caplog):
    # Valid JSON about things the text never mentions (a small model's habit): the subject, the fact and the
    # time the pair does not hold are dropped; the grounded ones stay, however the model worded them.
    openai_stub.chat_script["main-model"] = [("reply", json.dumps({
        "summary": "User plans a trip.", "times": ["in June", "last Saturday"],
        "facts": ["My sister Dana comes along.", "I live in Porto."],
        "subjects": [{"name": "Lisbon Trip", "description": "", "type": "event"},
                     {"name": "Tagus Bridge", "description": "crosses the Douro", "type": "place"},
                     {"name": "Douro Trip", "description": "", "type": "event"},
                     {"name": "Dana", "description": "sister", "type": "person"}]}))]
    with caplog.at_level("INFO", logger="dreaming_dagster.extraction.extractors"):
        result = extractor(openai_stub).extract("I'm going to Lisbon with my sister Dana in June", "Have fun!")
    assert [s.name for s in result.subjects] == ["Lisbon Trip", "Dana"]
    assert result.facts == ["My sister Dana comes along."] and result.times == ["in June"]
    assert "'Tagus Bridge'" in caplog.text and "'Douro Trip'" in caplog.text and "'last Saturday'" in caplog.text


def test_a_refined_name_its_pairs_do_not_say_keeps_the_subjects_own(openai_stub):
    from dreaming_dagster.pipeline.refiners import OpenAIRefiner

    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", backoff_s=0.0)
    refiner = OpenAIRefiner(client, max_in_flight=2)
    proposals = {"Hiking Boots": "Merrell Moab Boots", "Lisbon": "Tagus Bridge", "Biscuit": "Biscuzzle"}
    openai_stub.default_chat_reply = lambda body: json.dumps(
        {"name": next((new for old, new in proposals.items() if f"Current name: {old}\n" in body["messages"][1]["content"]),
                      "Douro Cruise"),
         "narrative": "Bought in May; too stiff at first."})
    boots, lisbon, dog, long_name = refiner.refine_many([
        ("Hiking Boots", "Merrell Moab bought in May | too stiff at first",
         "I bought Merrell Moab boots in May. Nice! They were too stiff at first."),
        ("Lisbon", "anniversary trip | Rachel wants Porto too", "Our anniversary trip to Lisbon. Sounds lovely."),
        # The model's own description names the dog wrongly; the pairs never do.
        ("Biscuit", "Biscuzzle, the user's dog | chewed shoes", "My dog Biscuit chewed my shoes. Puppies chew."),
        ("Lisbon Anniversary Trip With Rachel And Dana", "Lisbon in June | Porto too", "Lisbon in June with Rachel.")])
    assert boots.name == "Merrell Moab Boots"  # grounded in its pairs: the better name is taken
    assert lisbon.name == "Lisbon" and lisbon.narrative  # invented: the subject keeps its own name
    assert dog.name == "Biscuit"  # only a description says it: not evidence
    assert long_name.name == "Lisbon Anniversary Trip With Rachel And Dana"  # kept whole, never cut to five words


def test_the_fallback_model_at_its_own_endpoint_answers_while_the_primary_is_down(openai_stub, clean_env):
    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.llm.client import chat_client
    from tests.conftest import free_port

    # The primary's server is down (nothing listens); the fallback is served elsewhere with its own key.
    clean_env.setenv("DREAMING_LLM_MODEL", "hosted-model")
    clean_env.setenv("DREAMING_LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    clean_env.setenv("DREAMING_LLM_FALLBACK_MODEL", "fallback-model")
    clean_env.setenv("DREAMING_LLM_FALLBACK_BASE_URL", openai_stub.base_url)
    clean_env.setenv("DREAMING_LLM_FALLBACK_API_KEY", "local-key")
    clean_env.setenv("DREAMING_LLM_BACKOFF_SECONDS", "0")
    openai_stub.chat_script["fallback-model"] = [("reject_schema", 500)]  # and the local server refuses json_schema
    openai_stub.default_chat_reply = lambda body: GOOD
    client = chat_client(DreamingSettings())
    x = OpenAIExtractor(client)
    for _ in range(2):
        assert [s.name for s in x.extract(*LISBON).subjects] == ["Lisbon", "Sister Dana"]
    assert client.calls_by_model["hosted-model"] == 2 * 3  # every attempt at the primary, each time
    calls = openai_stub.chat_calls("fallback-model")
    assert [c["response_format"]["type"] for c in calls] == ["json_schema", "json_schema", "json_object", "json_object"]
    assert {r["authorization"] for r in openai_stub.requests} == {"Bearer local-key"}


def test_calls_refused_while_the_format_is_probed_wait_for_its_answer(openai_stub):
    import time

    # llama.cpp's server refuses json_schema at once and answers slowly: five calls in flight are all refused
    # before the first one's probe has its answer. None of them may count the refusal as a failure.
    openai_stub.chat_script["main-model"] = [("reject_schema", 500)]

    def slow_answer(body):
        time.sleep(0.5)
        return GOOD

    openai_stub.default_chat_reply = slow_answer
    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", attempts_per_model=1,
                            backoff_s=0.0)
    results = OpenAIExtractor(client, max_in_flight=5).extract_many([LISBON] * 5)
    assert all(not isinstance(r, Exception) and r.subjects for r in results), results
    formats = [c["response_format"]["type"] for c in openai_stub.chat_calls()]
    assert formats.count("json_object") == 5 and formats.count("json_schema") <= 6  # five, and the probe's


def test_the_same_model_name_at_a_fallback_endpoint_is_a_second_target(openai_stub):
    from tests.conftest import free_port

    # A hosted "main-model" that is down, and the same model served locally: both are tried, in order.
    client = JSONChatClient(model="main-model", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k",
                            fallback_model="main-model", fallback_base_url=openai_stub.base_url,
                            attempts_per_model=1, backoff_s=0.0)
    openai_stub.default_chat_reply = lambda body: GOOD
    assert OpenAIExtractor(client).extract(*LISBON).subjects
    assert client.calls_by_model["main-model"] == 2 and len(openai_stub.chat_calls("main-model")) == 1
    assert client.output_formats() == [("main-model", "json_schema"), ("main-model", "json_schema")]
