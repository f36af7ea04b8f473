"""Time: the grammar on the labelled set and on random text, the dating stage, the question's window, the
time_fit signal against its Python statement, the time-window pool, and the window in every result."""

from __future__ import annotations

import csv
import json
import random
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreaming_dagster.dates.finding import find_times
from dreaming_dagster.dates.grammar import resolve
from dreaming_dagster.dates.questions import MARGIN_DAYS, read_question
from dreaming_dagster.dates.ranges import FIRST_DAY, LAST_DAY, TimeRange
from dreaming_dagster.dates.scoring import read_labelled, score
from dreaming_dagster.extraction.extractors import OfflineExtractor, OpenAIExtractor
from dreaming_dagster.ingest.embedding import user_stats
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.llm.client import JSONChatClient
from dreaming_dagster.pipeline import dating
from dreaming_dagster.pipeline.extracting import extract_pending
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.reporting import recall_table
from dreaming_dagster.retrieval.ranker import COSINE_ONLY, NO_MODEL, NO_MODEL_WITH_TIME
from dreaming_dagster.retrieval.recaller import (
    NO_GRAPH_SIDE,
    NO_TIME_SIDE,
    Recaller,
    TimeSide,
    composite_rows,
    validate_request,
)
from dreaming_dagster.retrieval.signals import range_fit, time_fit, time_text
from tests.conftest import PROJECT_ROOT, pair
from tests.retrieval_fixtures import HashEmbedder

LABELLED = PROJECT_ROOT / "tests" / "data" / "time_expressions.tsv"


def labelled_rows() -> list[tuple[date, str, tuple | None]]:
    with LABELLED.open(encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t") if r and not r[0].startswith("#")][1:]
    return [(date.fromisoformat(ref), expression, None if first == "-" else
             (date.fromisoformat(first), date.fromisoformat(last), granularity))
            for ref, expression, first, last, granularity in rows]


def test_the_resolver_reads_the_labelled_set():
    rows = labelled_rows()
    assert len(rows) >= 200 and sum(expected is None for *_, expected in rows) >= 10
    wrong = []
    for reference, expression, expected in rows:
        found = resolve(expression, reference)
        got = None if found is None else (found.first_day, found.last_day, found.granularity)
        if got != expected:
            wrong.append((reference, expression, expected, got))
    assert len(wrong) <= 0.05 * len(rows), wrong


def test_early_mid_and_late_split_each_kind_of_period():
    day = date(2023, 5, 20)
    cases = {"early summer 2021": (date(2021, 6, 1), date(2021, 6, 30)),  # a season: its months
             "late winter 2022": (date(2023, 2, 1), date(2023, 2, 28)),
             "mid-2022": (date(2022, 5, 1), date(2022, 8, 31)),  # a year: its thirds
             "late April": (date(2023, 4, 21), date(2023, 4, 30)),  # a month: its tens of days
             "the end of last week": (date(2023, 5, 12), date(2023, 5, 14))}  # a week: its last days
    assert {text: (r.first_day, r.last_day) for text in cases if (r := resolve(text, day))} == cases


def test_a_reference_time_is_read_on_its_own_calendar():
    """A time with an offset is read on the day it was where it was written; a naive time as UTC."""
    late_evening_in_new_york = datetime(2023, 5, 20, 23, 30, tzinfo=timezone(timedelta(hours=-4)))
    assert resolve("yesterday", late_evening_in_new_york).first_day == date(2023, 5, 19)
    assert resolve("yesterday", datetime(2023, 5, 20, 12, 0)).first_day == date(2023, 5, 19)  # naive: UTC
    # The caller's 1 December (30 November in UTC): "last month" is November.
    kiribati = datetime(2024, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=14)))
    window = read_question("what did I buy last month?", kiribati).window
    assert (window.first_day, window.last_day) == (date(2024, 11, 1), date(2024, 11, 30))
    request = validate_request("alice", "what did I buy last month?", as_of="2024-12-01T00:30:00+14:00")
    assert read_question(request.query, request.as_of).window == window  # as recall reads an as_of


def test_times_are_found_where_people_write_them():
    """The labelled sets of real sentences (user turns of the LongMemEval oracle; bench/time_finding.py reports
    them) keep their precision and recall — 0.95 each on the oracle's sentences; on the _S haystacks'
    distractor sessions, whose data rows and titles it reads less well, what they measured — and the sentences
    a reader dates differently from the nearest-day convention are read as the reader would."""
    data = PROJECT_ROOT / "tests" / "data"
    development = score(read_labelled(data / "time_sentences.tsv")).as_dict()
    held_out = score(read_labelled(data / "time_sentences_heldout.tsv")).as_dict()
    haystacks = score(read_labelled(data / "time_sentences_haystacks.tsv")).as_dict()
    qualified = score(read_labelled(data / "time_sentences_qualified.tsv")).as_dict()
    assert development["sentences"] >= 300 and development["negatives"] >= 100
    for measure in ("finding_precision", "finding_recall", "resolving_precision", "resolving_recall"):
        assert development[measure] >= 0.95, (measure, development["errors"])
        assert held_out[measure] >= 0.95, (measure, held_out["errors"])
        assert haystacks[measure] >= 0.88, (measure, haystacks["errors"])
        assert qualified[measure] >= 0.95, (measure, qualified["errors"])
    sunday = date(2024, 12, 1)

    def read(text: str) -> list[tuple[str, date, date]]:
        return [(m.text, m.range.first_day, m.range.last_day) for m in find_times(text, sunday)]

    saturday, friday, monday = date(2024, 11, 30), date(2024, 11, 29), date(2024, 11, 25)
    assert read("Last Saturday was my sister's wedding") == [("Last Saturday", saturday, saturday)]
    assert read("This Friday is my day off") == [("This Friday", friday, friday)]
    assert read("Monday was rough") == [("Monday", monday, monday)]
    # A month qualified by a year phrase, a weekday with its date, a past told by an irregular verb: one event.
    may15 = date(2024, 5, 15)

    def read_on(text: str, reference: date) -> list[tuple[str, date, date]]:
        return [(m.text, m.range.first_day, m.range.last_day) for m in find_times(text, reference)]

    august_2023 = (date(2023, 8, 1), date(2023, 8, 31))
    assert read_on("In August I quit smoking.", may15) == [("August", *august_2023)]
    assert [r[1:] for r in read_on("I quit smoking last year in August.", may15)] == [august_2023]
    assert read_on("I met Sara on Monday, May 6th.", may15) == [("Monday, May 6th", date(2024, 5, 6), date(2024, 5, 6))]
    for question, window in (("what did I do on Monday May 6?", (date(2024, 5, 6), date(2024, 5, 6))),
                             ("what happened in August last year?", august_2023)):
        found = read_question(question, may15).window
        assert (found.first_day, found.last_day) == window, question
    for nothing in ("May I ask you something?", "I tried it a second time", "She wore her Sunday best",
                    "We read about it in the fall of the empire", "He took 3rd place", "I could not fall asleep",
                    "I swim on Sundays", "I work Monday to Friday", "We watched Halloween Horror Nights"):
        assert read(nothing) == [], nothing
    # A month word that is also a name or a verb, before a year in words: the year, not the month.
    for text, year in (("I met Jan last year", 2023), ("We may this year finally visit Spain", 2024),
                       ("The troops march next year", 2025), ("I met June last year", 2023),
                       ("I met August last year", 2023)):
        assert [r[1:] for r in read_on(text, may15)] == [(date(year, 1, 1), date(year, 12, 31))], text
    assert [r[1:] for r in read_on("I moved in March next year", may15)] == [(date(2025, 3, 1), date(2025, 3, 31))]
    assert [r[1:] for r in read_on("It rained in June last year", may15)] == [(date(2023, 6, 1), date(2023, 6, 30))]
    # Past tense reads the last one before the day; the future the next one after it.
    march_2024 = (date(2024, 3, 1), date(2024, 3, 31))
    asked = read_question("When did I go to the dentist in March?", sunday).window
    assert (asked.first_day, asked.last_day) == march_2024
    assert read("I'm going to the dentist in March")[0][1:] == (date(2025, 3, 1), date(2025, 3, 31))
    assert read("I went to Rome on June 3")[0][1:] == (date(2024, 6, 3), date(2024, 6, 3))
    assert read("I'll see her on Thursday")[0][1:] == (date(2024, 12, 5), date(2024, 12, 5))
    assert read("We were in Lisbon on March 15-16")[0][1:] == (date(2024, 3, 15), date(2024, 3, 16))
    assert read("on May 3rd and 4th we hiked")[0][1:] == (date(2024, 5, 3), date(2024, 5, 4))
    assert read("on May 3 and 4 people came")[0][1:] == (date(2024, 5, 3), date(2024, 5, 3))  # a count
    assert read("I hiked two weekends ago")[0][1:] == (date(2024, 11, 16), date(2024, 11, 17))
    assert read("I will run a 10K by the end of the summer")[0][1:] == (date(2025, 8, 1), date(2025, 8, 31))
    assert read("We met on the 17th and 18th of April")[0][1:] == (date(2024, 4, 17), date(2024, 4, 18))
    assert read("over the next three days")[0][1:] == (sunday, date(2024, 12, 4))
    assert read("Ruth, a woman in her 40s, teaches") == [] and read("We saw The 1975 play") == []
    between = read_question("What did I buy between 1999 and 1990?", sunday).window
    assert (between.first_day, between.last_day) == (date(1990, 1, 1), date(1999, 12, 31))


TIME_WORDS = ["last", "next", "this", "the", "ago", "in", "before", "after", "between", "and", "or", "since",
              "day", "days", "week", "weekend", "month", "months", "year", "years", "decade", "May", "march",
              "December", "Saturday", "monday", "summer", "fall", "Christmas", "Easter", "early", "late", "mid",
              "3rd", "31st", "2023", "1999", "9999", "0001", "90s", "2/29", "12/31/9999", "1/1/0001",
              "999999", "a few", "two", "yesterday", "tomorrow", "recently", "first", ",", "?"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(st.sampled_from(TIME_WORDS) | st.text(max_size=8), max_size=14),
       day=st.dates(min_value=FIRST_DAY, max_value=LAST_DAY))
def test_any_text_at_any_reference_day_gives_ranges_inside_the_calendar(words, day):
    text = " ".join(words)
    for mention in find_times(text, day):
        assert FIRST_DAY <= mention.range.first_day <= mention.range.last_day <= LAST_DAY
        assert text[mention.start:mention.end] == mention.text and 0 < mention.range.certainty <= 1
    asked = read_question(text, day)
    if asked.window is not None:
        assert FIRST_DAY <= asked.window.first_day <= asked.window.last_day <= LAST_DAY
        assert asked.relation in ("in", "before", "after", "since", "until", "between")
    assert asked.as_dict() is None or json.dumps(asked.as_dict())


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), day=st.dates(min_value=FIRST_DAY, max_value=LAST_DAY))
def test_random_text_never_raises(text, day):
    find_times(text, day)
    read_question(text, day)
    resolve(text, day)


def test_question_windows_relations_order_and_sides():
    asked_on = date(2023, 5, 30)
    last_month = read_question("Which pair of shoes did I clean last month?", asked_on)
    assert (last_month.window.first_day, last_month.window.last_day) == (date(2023, 4, 1), date(2023, 4, 30))
    assert last_month.as_dict()["label"] == "1–30 April 2023" and last_month.relation == "in"
    before = read_question("What did I buy before March?", asked_on)
    assert (before.relation, before.window.first_day, before.window.last_day) == ("before", FIRST_DAY,
                                                                                   date(2023, 2, 28))
    assert before.as_dict()["label"] == "until 28 February 2023"
    between = read_question("What happened between June 3 and June 10?", date(2023, 6, 20))
    assert (between.relation, between.window.first_day, between.window.last_day) == (
        "between", date(2023, 6, 3), date(2023, 6, 10))
    sides = read_question("Which trip did I take first, the one to Europe or the solo trip to Thailand?", asked_on)
    assert sides.window is None and sides.order == "first"
    assert sides.sides == ("one to Europe", "solo trip to Thailand")
    assert read_question("Which streaming service did I start using most recently?", asked_on).window is None
    assert read_question("How much did my followers grow in two weeks?", asked_on).window is None
    assert read_question("What is my sister's name?", asked_on).as_dict() is None


def test_sql_range_fit_and_time_fit_equal_the_python_statement(database):
    database.ensure_schema(HashEmbedder.spec)
    rng = random.Random(3)
    cases = []
    for _ in range(300):
        a, w = date(2023, 1, 1) + timedelta(days=rng.randint(0, 400)), date(2023, 1, 1) + timedelta(days=rng.randint(0, 400))
        cases.append((a, a + timedelta(days=rng.choice([0, 0, 1, 6, 30, 90])), rng.choice(list(MARGIN_DAYS.values())),
                      w, w + timedelta(days=rng.choice([0, 1, 6, 29, 364])), rng.choice(list(MARGIN_DAYS.values()))))
    with database.connect() as conn:
        for case in cases:
            (got,) = conn.execute("SELECT range_fit(%s, %s, %s, %s, %s, %s)", case).fetchone().values()
            assert got == pytest.approx(range_fit(*case), abs=1e-9)
            assert 0 <= got <= 1
        margins = {row["g"]: row["m"] for row in conn.execute(
            "SELECT g, granularity_margin_days(g) AS m FROM unnest(%s::text[]) AS g", (list(MARGIN_DAYS),))}
    assert margins == MARGIN_DAYS
    window = TimeRange(date(2023, 4, 1), date(2023, 4, 30), "month", 0.9)
    said = datetime(2023, 5, 24, 9, tzinfo=UTC)
    assert time_fit(said, [], None) == 0.0
    assert time_fit(said, [TimeRange(date(2023, 4, 20), date(2023, 4, 20), "day")], window) == pytest.approx(0.9)
    # Said 24 days after the window: nothing; 3 and 6 days after: 1 − 3/8 and 1 − 6/8 (a day's and a month's
    # soft edges), by the window's certainty.
    assert time_fit(said, [], window) == 0.0
    assert time_fit(datetime(2023, 5, 3, tzinfo=UTC), [], window) == pytest.approx(0.9 * (1 - 3 / 8))
    assert time_fit(datetime(2023, 5, 6, tzinfo=UTC), [], window) == pytest.approx(0.9 * (1 - 6 / 8))
    # time_text: the mentioned times alone; time_fit is the better of it and the day said.
    mentioned = [TimeRange(date(2023, 4, 20), date(2023, 4, 20), "day", 0.5)]
    assert time_text(mentioned, window) == pytest.approx(0.45) and time_text([], window) == 0.0
    assert time_text(mentioned, None) == 0.0
    assert time_fit(datetime(2023, 4, 2, tzinfo=UTC), mentioned, window) == pytest.approx(0.9)


SNEAKERS = "I cleaned my white sneakers with a toothbrush and baking soda."


def dated_memory(database, embedder, user_id: str, said: list[tuple[str, str]]) -> None:
    save_pairs(user_id, [pair(n, f"s{n}", user_message=text, assistant_message="Nice work.", occurred_at=when)
                         for n, (text, when) in enumerate(said)], database=database, embedder=embedder)
    sync_user(user_id, database=database, embedder=embedder, extractor=OfflineExtractor(), refiner=OfflineRefiner())


def test_the_dating_stage_dates_the_users_turn_once(database, local_embedder):
    dated_memory(database, local_embedder, "alice", [
        ("I cleaned my white sneakers last Saturday.", "2023-05-24T09:00:00Z"),
        ("We went to Lisbon in May and Porto two weeks ago.", "2023-06-20T09:00:00Z"),
        ("No times here, just sneakers.", "2023-06-21T09:00:00Z")])
    with database.connect() as conn:
        rows = conn.execute("SELECT expression, first_day, last_day, granularity, source FROM pair_times "
                            "WHERE user_id = 'alice' ORDER BY first_day").fetchall()
    assert [(r["expression"], r["first_day"], r["last_day"], r["granularity"]) for r in rows] == [
        ("May", date(2023, 5, 1), date(2023, 5, 31), "month"),
        ("last Saturday", date(2023, 5, 20), date(2023, 5, 20), "day"),
        ("two weeks ago", date(2023, 6, 5), date(2023, 6, 11), "week")]
    assert {r["source"] for r in rows} == {"text"}
    again = sync_user("alice", database=database, embedder=local_embedder, extractor=OfflineExtractor(),
                      refiner=OfflineRefiner())
    assert again.dating == {"pairs": 0, "with_times": 0, "times": 0}
    counts = dating.dated_pair_counts(database, "alice")
    assert (counts["pairs"], counts["with_times"], counts["pending"]) == (3, 2, 0)
    assert user_stats(database, "alice")[0]["dated_pairs"] == 2
    assert dating.dated_pair_counts(database, "nobody") == {"pairs": 0, "with_times": 0, "pending": 0}


def test_llm_reported_times_are_resolved_against_the_pair(database, openai_stub, embedder16):
    save_pairs("alice", [pair(1, user_message="We fly out next Friday.", occurred_at="2023-05-24T09:00:00Z")],
               database=database, embedder=embedder16)
    openai_stub.default_chat_reply = lambda body: json.dumps({
        "summary": "A trip.", "subjects": [{"name": "Trip", "description": "a flight", "type": "event"}],
        "times": ["next Friday", "the day before my birthday", ""]})
    client = JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k", backoff_s=0.0)
    assert extract_pending(database, OpenAIExtractor(client), "alice", "default").pairs == 1
    with database.connect() as conn:
        rows = conn.execute("SELECT source, expression, first_day FROM pair_times WHERE user_id = 'alice'").fetchall()
    assert [(r["source"], r["expression"], r["first_day"]) for r in rows] == [
        ("llm", "next Friday", date(2023, 5, 26))]
    system_prompt = openai_stub.chat_calls()[0]["messages"][0]["content"]
    assert '"times"' in system_prompt


def test_last_months_pair_ranks_first_among_identical_pairs_without_a_model(database, local_embedder):
    dated_memory(database, local_embedder, "alice", [(SNEAKERS, f"2023-{month:02d}-15T09:00:00Z")
                                                     for month in (2, 3, 4, 5)])
    recaller = Recaller(database, local_embedder, shipped_ranker=None)
    try:
        asked = recaller.recall("alice", "Which sneakers did I clean last month?", k=4, as_of="2023-05-20T12:00:00Z")
        assert asked.memories[0].occurred_at.month == 4 and asked.memories[0].signals["time_fit"] == 1.0
        assert asked.weights == NO_MODEL_WITH_TIME
        assert asked.as_dict()["time"]["label"] == "1–30 April 2023"
        plain = recaller.recall("alice", "Which sneakers did I clean?", k=4, as_of="2023-05-20T12:00:00Z")
        assert plain.time.window is None and plain.as_dict()["time"] is None and plain.weights is NO_MODEL
        assert all(m.signals["time_fit"] == 0 for m in plain)
        rendered = recall_table(asked).title
        # The table shows the signals that carry weight, heaviest first: cosine, then lex and time_fit at 0.5.
        assert [column.header for column in recall_table(asked).columns][1:5] == ["score", "cos", "lex", "time\nfit"]
        assert "last month → 1–30 April 2023" in rendered
    finally:
        recaller.close()


def test_an_in_window_pair_outside_the_global_pool_is_drawn_by_the_time_side(database, local_embedder):
    crowd = [(f"{SNEAKERS} Round {n}.", f"2023-03-{n + 1:02d}T09:00:00Z") for n in range(12)]
    dated_memory(database, local_embedder, "alice", crowd + [
        ("Washed the kids' trainers in the machine, it worked fine.", "2023-04-12T09:00:00Z")])
    question = "Which sneakers did I clean last month?"
    embedding = local_embedder.embed([question])[0]

    def pool(time_side):  # the whole pool, as training reads it
        with database.connect() as conn:
            return composite_rows(conn, user_id="alice", kg_id="default", query_embedding=embedding,
                                  query_text=question, weights=COSINE_ONLY, pool_size=4, lexical_pool_size=4,
                                  time=read_question(question, date(2023, 5, 20)), time_side=time_side,
                                  as_of=datetime(2023, 5, 20, 12, tzinfo=UTC))

    # The vector and word sides (4 each) hold only March's closer pairs; the time side adds April's.
    with_time, without = pool(TimeSide(pool_size=3)), pool(NO_TIME_SIDE)
    (april,) = [row for row in with_time if row["occurred_at"].month == 4]
    assert april["in_window_pool"] and not (april["in_vector_pool"] or april["in_lexical_pool"])
    assert april["time_fit"] == 1.0
    assert {row["id"] for row in without} == {row["id"] for row in with_time} - {april["id"]}
    assert all(row["time_fit"] == 0 for row in with_time if row["occurred_at"].month == 3)


def test_the_time_side_reads_the_window_before_its_edges_up_to_the_scan_limit(database, local_embedder):
    said = {"april 5": ("Bought a kettle.", "2023-04-05T09:00:00Z"),
            "april 25": ("Fixed the bike chain.", "2023-04-25T09:00:00Z"),
            "may 10, of april 8": ("On April 8 I repainted the fence.", "2023-05-10T09:00:00Z"),
            "march 29": ("Planted tomatoes.", "2023-03-29T09:00:00Z"),
            "may 3": ("Baked sourdough bread.", "2023-05-03T09:00:00Z")}
    dated_memory(database, local_embedder, "alice", list(said.values()))
    question = "What did I do last month?"
    embedding = local_embedder.embed([question])[0]

    def window_rows(scan_limit):
        with database.connect() as conn:
            return composite_rows(conn, user_id="alice", kg_id="default", query_embedding=embedding,
                                  query_text=question, weights=COSINE_ONLY, pool_size=0, lexical_pool_size=0,
                                  graph=NO_GRAPH_SIDE, key_pool_size=0, time=read_question(question, date(2023, 5, 20)),
                                  time_side=TimeSide(pool_size=10, scan_limit=scan_limit),
                                  as_of=datetime(2023, 5, 20, 12, tzinfo=UTC))

    names = {text: name for name, (text, _) in said.items()}

    def window_side(scan_limit):  # the pairs the time side may draw: the whole window side, nothing else
        return {names[row["user_message"]] for row in window_rows(scan_limit) if row["in_window_pool"]}

    # Inside April (said there, or mentioning a day of it) first, most recent first; then its soft edges.
    assert window_side(2) == {"may 10, of april 8", "april 25"}
    assert window_side(3) == {"may 10, of april 8", "april 25", "april 5"}
    assert window_side(4) == {"may 10, of april 8", "april 25", "april 5", "may 3"}
    assert window_side(10) == set(said)
    # Whether a pair's time comes from what it says (time_text) or from the day it was said (time_fit alone).
    fits = {names[row["user_message"]]: (row["time_fit"], row["time_text"]) for row in window_rows(10)}
    assert fits["may 10, of april 8"] == (1.0, 1.0) and fits["april 25"] == (1.0, 0.0)
    assert fits["may 3"][1] == 0.0 and 0 < fits["may 3"][0] < 1  # on the soft edge


def test_a_windowless_question_ranks_exactly_as_without_the_time_side(database, local_embedder):
    dated_memory(database, local_embedder, "alice", [(f"{SNEAKERS} {n}", f"2023-0{1 + n % 5}-1{n}T09:00:00Z")
                                                     for n in range(8)])
    query = "what do I use to clean sneakers"
    embedding = local_embedder.embed([query])[0]
    with database.connect() as conn:
        rows = [composite_rows(conn, user_id="alice", kg_id="default", query_embedding=embedding, query_text=query,
                               weights=COSINE_ONLY, pool_size=5, lexical_pool_size=5, time=read_question(query, date(2023, 6, 1)),
                               reference_time=datetime(2023, 6, 1, tzinfo=UTC), time_side=side)
                for side in (TimeSide(), NO_TIME_SIDE)]
    assert rows[0] == rows[1] and rows[0]


def test_each_side_of_a_two_sided_question_draws_its_own_candidates(database, local_embedder):
    filler = [(f"Which happened first? The sneaker cleaning, round {n}.", f"2023-03-{n + 1:02d}T09:00:00Z")
              for n in range(10)]
    dated_memory(database, local_embedder, "alice", filler + [
        ("We finally adopted a golden retriever puppy named Max.", "2023-02-01T09:00:00Z"),
        ("I started my Spanish evening classes at the community college.", "2023-02-20T09:00:00Z")])
    question = "Which happened first, the sneaker cleaning or the Spanish classes?"
    asked = read_question(question, date(2023, 5, 1))
    assert asked.sides == ("sneaker cleaning", "Spanish classes") and asked.window is None
    query, *sides = local_embedder.embed([question, *asked.sides])

    def pool(side_embeddings):
        with database.connect() as conn:
            return composite_rows(conn, user_id="alice", kg_id="default", query_embedding=query, query_text="",
                                  weights=COSINE_ONLY, pool_size=2, lexical_pool_size=0, time=asked,
                                  time_side=TimeSide(pool_size=2), side_embeddings=side_embeddings)

    spanish = [r for r in pool(sides) if "Spanish" in r["user_message"]]
    assert spanish and spanish[0]["in_window_pool"] and not spanish[0]["in_vector_pool"]
    assert not [r for r in pool([]) if "Spanish" in r["user_message"]]
    recaller = Recaller(database, local_embedder, pool_size=2, lexical_pool_size=0, time_side=TimeSide(pool_size=2))
    try:
        result = recaller.recall("alice", question, k=2)
    finally:
        recaller.close()
    assert result.as_dict()["time"]["sides"] == ["sneaker cleaning", "Spanish classes"]


def test_every_rule_reads_the_phrases_written_beside_it():
    """Each pattern of the grammar carries example phrases (dates/grammar.py); each is the whole of what the pattern
    matches, and the rule's function reads it into a range."""
    from dreaming_dagster.dates.grammar import RULE_EXAMPLES, RULES

    assert len(RULE_EXAMPLES) == len(RULES) and all(examples for _, _, examples in RULE_EXAMPLES)
    unread = []
    for pattern, function, examples in RULE_EXAMPLES:
        for example in examples:
            match = pattern.fullmatch(example)
            if match is None or function(match, date(2024, 6, 20)) is None:
                unread.append((function.__name__, example))
    assert unread == []
