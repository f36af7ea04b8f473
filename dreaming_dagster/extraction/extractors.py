"""Extraction providers: ``openai`` (any OpenAI-compatible chat endpoint) and the offline one.

``offline`` (the default without an endpoint) reads named entities and noun phrases with spaCy's small
English pipeline (``extraction/entities.py``): subjects a person would recognise ("Golden Gate Park",
"Sourdough Recipe", "Rachel"), typed from the entity label, deterministic, no download at run time.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.extraction import entities
from dreaming_dagster.extraction.grounding import grounded_extraction
from dreaming_dagster.extraction.schema import ExtractedSubject, Extraction, json_schema
from dreaming_dagster.llm.client import JSONChatClient, call_each, chat_client
from dreaming_dagster.prompts import load_prompt

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS_PER_TURN = 12_000

# What the offline extractors read of a turn: user turns average ~51 words; a rare pasted essay is cut.
MAX_OFFLINE_CHARS = 4000


# The user's memory as an extractor may consult it: given lower-cased candidate names, the ones the memory
# already holds, each mapped to whether that subject is a hub (pipeline/extracting.held_subject_names).
SubjectMemory = Callable[[Collection[str]], Mapping[str, bool]]


class Extractor(Protocol):
    provider: str

    def extract_many(self, pairs: Sequence[tuple[str, str]],
                     memory: SubjectMemory | None = None) -> list[Extraction | Exception]:
        """One result per (user_message, assistant_message): an Extraction, or the error it raised.
        ``memory``: the user's memory, for extractors whose salience reads it (the offline one); others
        ignore it."""
        ...


# ----------------------------------------------------------------------------------------------- spaCy
class OfflineExtractor:
    """Deterministic, network-free extraction: named entities and noun phrases of the user's turn and of
    the first ``reply_sentences`` sentences of the reply, the ``max_subjects`` most salient kept.

    ``processes`` > 1 analyses a batch of at least ``PARALLEL_MIN_PAIRS`` pairs in that many worker
    processes, kept from the first such batch until :meth:`close` (or the process's exit): parsing is
    nearly the whole cost. Each worker parses a share of the batch and sends back its pairs' candidates,
    not their parses. (spaCy's own ``nlp.pipe(n_process=…)``, used before, started its workers for every
    call and sent every parse back to be rebuilt in this process: a 400-pair batch took 1.3-1.4× as long.)
    """

    provider = "offline"
    PARALLEL_MIN_PAIRS = 200
    batch_size = 400  # pairs the extraction stage hands over at once: a backlog reaches the worker processes
    CHUNKS_PER_WORKER = 4  # a batch in smaller shares than one a worker, so a worker with short texts is not idle

    def __init__(self, max_subjects: int = 3, reply_sentences: int = 2, processes: int = 1):
        if max_subjects < 0 or reply_sentences < 0 or processes < 1:
            raise ValueError("max_subjects and reply_sentences must be ≥ 0, processes ≥ 1")
        self.max_subjects, self.reply_sentences, self.processes = max_subjects, reply_sentences, processes
        self._workers: ProcessPoolExecutor | None = None
        self._workers_lock = threading.Lock()

    def close(self) -> None:
        """Stop the worker processes (started again by the next large batch)."""
        with self._workers_lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.shutdown(wait=True, cancel_futures=True)

    def __getstate__(self) -> dict:  # pickled (to a worker, say): the settings, never the pool or its lock
        return {"max_subjects": self.max_subjects, "reply_sentences": self.reply_sentences,
                "processes": self.processes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def _analyse_in_workers(self, pairs: Sequence[tuple[str, str]]) -> list[list[entities.Candidate] | Exception]:
        with self._workers_lock:
            if self._workers is None:
                # Spawned, never forked: a fresh interpreter inherits no socket, database connection, lock or
                # signal handler of a parent that runs other threads (a server's), and exits with it.
                self._workers = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                    initializer=_worker_started)
            workers = self._workers
        size = -(-len(pairs) // (self.processes * self.CHUNKS_PER_WORKER))
        one_process = OfflineExtractor(self.max_subjects, self.reply_sentences)
        try:
            shares = workers.map(one_process.analyse, [pairs[i:i + size] for i in range(0, len(pairs), size)])
            return [found for share in shares for found in share]
        except BrokenProcessPool:  # a worker died (killed, out of memory): read here, new workers next time
            logger.warning("an extraction worker process died; analysing %d pairs in this process", len(pairs))
            with self._workers_lock:
                if self._workers is workers:
                    self._workers = None
            return one_process.analyse(pairs)

    def _texts(self, user_message: str, assistant_message: str) -> tuple[str, str]:
        user = user_message.strip()[:MAX_OFFLINE_CHARS]
        if not user:  # nothing from the user: the reply is all there is to read
            return "", assistant_message.strip()[:MAX_OFFLINE_CHARS]
        return user, entities.reply_head(assistant_message, self.reply_sentences)

    @staticmethod
    def _extraction(user_message: str, assistant_message: str, chosen: list[entities.Candidate]) -> Extraction:
        subjects = [{"name": c.name, "description": c.sentence, "type": c.type} for c in chosen]
        return Extraction.model_validate({
            "summary": entities.first_sentence(user_message or assistant_message), "subjects": subjects})

    def extract(self, user_message: str, assistant_message: str) -> Extraction:
        (result,) = self.extract_many([(user_message, assistant_message)])
        if isinstance(result, Exception):
            raise result
        return result

    @staticmethod
    def _parse_in_process(user_texts: list[str], reply_texts: list[str]) -> tuple[list, list]:
        """The user turns through the whole pipeline and the reply heads through the entity recogniser alone
        (the reply is read for names: its noun phrases are the assistant's wording), the recogniser run once
        over both: it has its own token vectors (it reads no other component's output), and each pipeline
        call has a fixed cost, most of a short text's (the fast path's one pair: 37.7 → 31.5 ms; the same
        annotations as two separate calls on 60 LongMemEval pairs: tests/test_offline_extraction.py)."""
        with entities.parsing():
            nlp = entities.english_pipeline()
            user_docs = list(nlp.pipe(user_texts, batch_size=64, disable=["ner"]))
            docs = list(nlp.get_pipe("ner").pipe(user_docs + [nlp.make_doc(text) for text in reply_texts], batch_size=64))
        return docs[:len(user_texts)], docs[len(user_texts):]

    def _choose(self, found: list[list[entities.Candidate]], memory: SubjectMemory | None) -> list[list[entities.Candidate]]:
        """Each pair's subjects: by its own salience alone, or (given the user's memory) within it."""
        if memory is None:
            return [entities.salient(candidates, self.max_subjects) for candidates in found]
        held = memory(sorted({c.name.lower() for candidates in found for c in candidates}))
        return entities.salient_in_memory(found, held, self.max_subjects)

    def analyse(self, pairs: Sequence[tuple[str, str]]) -> list[list[entities.Candidate] | Exception]:
        """Each pair's subject candidates with their salience, read from its parse (nearly all of extraction's
        time; the user's memory is consulted after, in :meth:`extract_many`), or the error that kept the
        pair from being read. A batch the parser refuses is read pair by pair, so one text costs only itself."""
        if self.processes > 1 and len(pairs) >= self.PARALLEL_MIN_PAIRS:
            return self._analyse_in_workers(pairs)
        texts = [self._texts(user, reply) for user, reply in pairs]
        try:
            user_docs, reply_docs = self._parse_in_process([user for user, _ in texts], [reply for _, reply in texts])
        except Exception as error:  # noqa: BLE001 - one unreadable text must not fail the batch: read pair by pair
            if len(pairs) == 1:
                return [error]
            return [self.analyse([pair])[0] for pair in pairs]
        found: list[list[entities.Candidate] | Exception] = []
        for user_doc, reply_doc in zip(user_docs, reply_docs, strict=True):
            try:
                found.append(entities.candidates(user_doc, reply_doc))
            except Exception as error:  # noqa: BLE001 - recorded per pair by the stage
                found.append(error)
        return found

    def extract_many(self, pairs: Sequence[tuple[str, str]],
                     memory: SubjectMemory | None = None) -> list[Extraction | Exception]:
        analysed = self.analyse(pairs)
        readable = [found for found in analysed if not isinstance(found, Exception)]
        chosen = iter(self._choose(readable, memory))
        results: list[Extraction | Exception] = []
        for (user, reply), found in zip(pairs, analysed, strict=True):
            if isinstance(found, Exception):
                results.append(found)
                continue
            try:
                results.append(self._extraction(user, reply, next(chosen)))
            except Exception as error:  # noqa: BLE001 - recorded per pair by the stage
                results.append(error)
        return results


def _worker_started() -> None:
    """In each extraction worker: end with the parent process, however it ends (a SIGKILL included: the pipe
    multiprocessing keeps to the parent closes), and leave Ctrl-C to the parent, which stops its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()

    def exit_with_parent() -> None:
        parent.join()
        os._exit(0)

    if parent is not None:
        threading.Thread(target=exit_with_parent, name="exit-with-parent", daemon=True).start()


# ----------------------------------------------------------------------------------------------- openai
class OpenAIExtractor:
    """Structured extraction through an OpenAI-compatible chat endpoint, up to ``max_in_flight`` calls.
    What the answer names that the pair's text does not say is dropped (``extraction/grounding.py``)."""

    provider = "openai"

    def __init__(self, client: JSONChatClient, max_in_flight: int = 5):
        self.client, self.max_in_flight = client, max_in_flight

    def extract(self, user_message: str, assistant_message: str) -> Extraction:
        exchange = (f"User: {user_message[:MAX_PROMPT_CHARS_PER_TURN]}\n\n"
                    f"Assistant: {assistant_message[:MAX_PROMPT_CHARS_PER_TURN]}")
        messages = [{"role": "system", "content": load_prompt("extraction")},
                    {"role": "user", "content": exchange}]
        answer = self.client.ask(messages, Extraction, "pair_extraction", json_schema())
        extraction, dropped = grounded_extraction(answer, user_message, assistant_message)
        if dropped:
            logger.info("extraction named what the pair does not say; dropped %s", ", ".join(dropped))
        return extraction

    def extract_many(self, pairs: Sequence[tuple[str, str]],
                     memory: SubjectMemory | None = None) -> list[Extraction | Exception]:
        # The model names subjects from the pair alone; the user's memory is not sent.
        return call_each(self.extract, pairs, self.max_in_flight)


__all__ = ["ExtractedSubject", "Extraction", "Extractor", "OfflineExtractor", "OpenAIExtractor"]


def extractor_from_settings(settings: DreamingSettings) -> Extractor:
    """The extractor the settings name: an LLM's when DREAMING_LLM_MODEL is set, else the offline one."""
    if settings.resolved_llm_provider == "openai":
        return OpenAIExtractor(chat_client(settings), max_in_flight=5)
    return OfflineExtractor(processes=settings.llm_offline_processes)
