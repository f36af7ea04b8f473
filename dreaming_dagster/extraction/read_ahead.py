"""Extraction read ahead: the costly part of extracting a pair, started while the pair is being stored.

Saving a pair and dreaming it at once (``pipeline.sync.save_and_sync``) runs three things in turn: the
embedding (both cores), the insert (Postgres: the word index, two HNSW insertions) and the sync, whose first
real work is extraction. The offline extractor's parse reads the pair's text alone, not the database, so it
can run on a thread while the insert waits on Postgres: the parse takes one core, the Postgres backend the
other (the thread holds Python's lock; the waiting insert does not). An LLM extractor's call reads the pair
alone too, and waits on the network instead.

:class:`ExtractionReadAhead` wraps an extractor for one such call: :meth:`~ExtractionReadAhead.start` hands
it pairs about to be stored, and the extraction stage, given the wrapper as its extractor, finishes those
pairs from what was read ahead (the memory-dependent choice of subjects runs in the stage, under the
graph's lock, as always) and extracts any other pending pair as usual. The results are the extractor's own:
the same analysis, computed earlier. An extractor without ``analyse`` (the keyphrase one: its cost is
small) is simply not read ahead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from dreaming_dagster.extraction.providers import AnalysingExtractor, Extractor, SubjectMemory
from dreaming_dagster.extraction.schema import Extraction

logger = logging.getLogger(__name__)

# A larger save is left to the stage: its batch is parsed in the extractor's worker processes, which only
# start for batches of ~200 pairs (OfflineExtractor.PARALLEL_MIN_PAIRS) and would not start from a thread.
READ_AHEAD_MAX_PAIRS = 64

Pair = tuple[str, str]


class ExtractionReadAhead:
    """``extractor`` with pairs read ahead on a thread of its own; used as the extractor of one sync.

    Thread-safe. Close it (or use it as a context manager) when the sync is done: that waits for a read
    still running and lets go of what was not used."""

    def __init__(self, extractor: Extractor, max_pairs: int = READ_AHEAD_MAX_PAIRS):
        self.extractor, self.max_pairs = extractor, max_pairs
        self.provider = extractor.provider
        self._lock = threading.Lock()
        self._started: dict[Pair, tuple[Future, int]] = {}  # pair -> (its batch's analysis, its index there)
        self._executor: ThreadPoolExecutor | None = None
        self.read_ahead = 0  # pairs whose analysis the stage took from here
        self.read_in_stage = 0  # pairs of a read-ahead batch the stage analysed itself (not started, or failed)

    def __getattr__(self, name: str):  # batch_size and the like: the extractor's own
        if name == "extractor":  # not set yet (a half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.extractor, name)

    @property
    def supported(self) -> bool:
        return isinstance(self.extractor, AnalysingExtractor)

    def start(self, pairs: Sequence[Pair]) -> bool:
        """Start analysing ``pairs`` (user_message, assistant_message: as they will be stored). Returns
        whether it started: not for an extractor without ``analyse``, an empty batch or one over
        ``max_pairs``."""
        pairs = list(dict.fromkeys(pairs))
        if not self.supported or not pairs or len(pairs) > self.max_pairs:
            return False
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extraction-read-ahead")
            future = self._executor.submit(self.extractor.analyse, pairs)
            for index, pair in enumerate(pairs):
                self._started.setdefault(pair, (future, index))
        return True

    def analyse(self, pairs: Sequence[Pair]) -> list[object]:
        """The extractor's analysis of ``pairs``: taken from what was read ahead where it was started, the
        rest analysed now (also a pair whose read failed as a whole)."""
        return self._analyse(pairs, self._started_for(pairs))

    def _started_for(self, pairs: Sequence[Pair]) -> list[tuple[Future, int] | None]:
        with self._lock:
            return [self._started.get(pair) for pair in pairs]

    def _analyse(self, pairs: Sequence[Pair], started: list[tuple[Future, int] | None]) -> list[object]:
        analysed: list[object] = [None] * len(pairs)
        missing: list[int] = []
        for index, entry in enumerate(started):
            if entry is None:
                missing.append(index)
                continue
            future, position = entry
            try:
                analysed[index] = future.result()[position]
            except Exception as error:  # noqa: BLE001 - the read failed as a whole: the stage reads the pair itself
                logger.warning("reading a pair ahead failed (%s: %s); extracting it in the stage",
                               type(error).__name__, error)
                missing.append(index)
        if missing:
            for index, found in zip(missing, self.extractor.analyse([pairs[i] for i in missing]), strict=True):
                analysed[index] = found
        with self._lock:
            self.read_ahead += len(pairs) - len(missing)
            self.read_in_stage += sum(1 for index in missing if started[index] is not None)
        return analysed

    def extract_many(self, pairs: Sequence[Pair], memory: SubjectMemory | None = None,
                     analysed: Sequence[object] | None = None) -> list[Extraction | Exception]:
        """The extractor's results for ``pairs``, finishing those read ahead from their analysis.
        ``analysed``: :meth:`analyse`'s result for them, when the stage took it earlier itself."""
        if analysed is None:
            started = self._started_for(pairs)
            if not any(started):
                return self.extractor.extract_many(pairs, memory=memory)
            analysed = self._analyse(pairs, started)
        return self.extractor.extract_many(pairs, memory=memory, analysed=analysed)

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            self._started.clear()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ExtractionReadAhead:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
