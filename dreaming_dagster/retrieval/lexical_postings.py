"""The lexical pool computed in the recall process: the exact BM25 top-k from word postings held in memory.

The composite statement can find the exact BM25 top-k itself (a threshold algorithm over the word blocks
of migration 0017), but in SQL that costs 15-30 ms on a user with 100,000 pairs: grouping ~60,000
postings by pair is the floor. Here the postings of the query's words are kept in the recall process as
arrays, every posting is scored (a vectorised sum, no pruning: exact by construction) and the pairs at or
above the k-th best score go to the statement as ``lexical_pool_pairs``, where they are scored again from
their ``pair_words`` rows exactly as the statement's own pool would be, cut at k (ties by pair id) and
ranked. Serving and the statement's pool therefore draw the same pairs (tests/test_lexical_postings.py).

Freshness: every recall first reads the query words' idf and a version of each word's postings
(``retrieval/lexical_query_words``, one small statement: the word's user_lexemes row's xmin and pair
count, which every change to its postings updates), then, for words whose version moved, their block list
with the postings of only the blocks not held at their version (``retrieval/word_block_postings``). A
saved pair changes its words' tail blocks, so the next recall reads those and nothing else; a pair saved
between the first read and the composite statement (a few milliseconds) is ranked if another side draws
it and pooled by BM25 from the next recall on. A recall ``as_of`` a time, and a cache of 0 MB, use the
statement's own pool.

Forgetting: a forgotten pair's postings leave the blocks that held them, so the versions above move and the
next recall reads those blocks again. An erased user's words leave the vocabulary, so no recall reads them;
what this process still holds of that user is dropped, with everything else held, at the first recall
after the erasure (the same first statement reads forget_log's newest erasure), and any forget empties the
process's cached subject names (embeddings.forget_cached_texts).

Memory: postings are held per (user, word) and evicted least recently used past ``max_bytes`` (about 36
bytes a posting). Tenancy: entries are keyed by user, and both statements read only the user's own words.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from dreaming_dagster.embeddings import forget_cached_texts
from dreaming_dagster.retrieval.signals import BM25_B, BM25_K1
from dreaming_dagster.sql import load_sql

# What holding a posting costs: its dense pair index (int32), term frequency and pair length (float32:
# small integers, exact) and its weight's three parts (float64); and a pair's entry in its user's list of
# pair numbers (a list slot and its int), besides the lookup's own arrays (_UserPairs.nbytes).
BYTES_PER_POSTING = 36
BYTES_PER_PAIR = 36
# Pairs at or above (1 - slack) x the k-th best score go to the statement, which rescores them exactly
# and cuts at k: this side's float sums may differ from Postgres' in the last bits, never by this much.
SCORE_SLACK = 1e-9


class _UserPairs:
    """A user's pair numbers as dense indexes (so a query's sums are one bincount over a short array).
    Append-only: an index, once given, keeps its pair; new pair numbers get the next indexes in ascending
    order of pair number.

    Lookups are vectorised, two ways. Pair numbers come from one sequence shared by every user, so a user's
    may be spread thinly over a wide range. While the range is at most ``TABLE_SLOTS_PER_PAIR`` slots a
    known pair (plus ``TABLE_MIN_SLOTS``) — a user who saved much of the database's pairs, where a cold word
    brings tens of thousands of postings — a direct table over the range answers with one gather; otherwise, and
    for good once the range gets too wide, a sorted copy is searched."""

    TABLE_SLOTS_PER_PAIR = 4
    TABLE_MIN_SLOTS = 1 << 16

    def __init__(self) -> None:
        self.pair_nos: list[int] = []  # dense index -> pair number
        self._table: np.ndarray | None = np.zeros(0, dtype=np.int32)  # pair number - base -> dense, -1: unknown
        self._base = 0
        self._sorted = np.zeros(0, dtype=np.int64)  # without a table: the pair numbers known, sorted
        self._sorted_dense = np.zeros(0, dtype=np.int32)  # their dense indexes

    @property
    def nbytes(self) -> int:
        """What the lookup structure holds beyond the pair list (counted against the cache's budget)."""
        table = 0 if self._table is None else self._table.nbytes
        return table + self._sorted.nbytes + self._sorted_dense.nbytes

    def dense(self, pair_nos: np.ndarray) -> np.ndarray:
        """The dense indexes of ``pair_nos`` (int64, repeats allowed), new pair numbers given the next ones
        in ascending order of pair number."""
        if not len(pair_nos):
            return np.zeros(0, dtype=np.int32)
        if self._table is not None and self._cover(int(pair_nos.min()), int(pair_nos.max()), len(pair_nos)):
            offsets = pair_nos - self._base
            dense = self._table[offsets]
            unknown = dense < 0
            if unknown.any():
                new = np.unique(pair_nos[unknown])
                self._table[new - self._base] = np.arange(len(self.pair_nos), len(self.pair_nos) + len(new),
                                                          dtype=np.int32)
                self.pair_nos.extend(new.tolist())
                dense[unknown] = self._table[offsets[unknown]]
            return dense
        dense = np.empty(len(pair_nos), dtype=np.int32)
        known = np.zeros(len(pair_nos), dtype=bool)
        if len(self._sorted):
            positions = np.minimum(np.searchsorted(self._sorted, pair_nos), len(self._sorted) - 1)
            known = self._sorted[positions] == pair_nos
            dense[known] = self._sorted_dense[positions[known]]
        if not known.all():
            # One pass over the unknown: their distinct numbers and where each falls among them.
            new, inverse = np.unique(pair_nos[~known], return_inverse=True)
            dense[~known] = len(self.pair_nos) + inverse
            dense_new = np.arange(len(self.pair_nos), len(self.pair_nos) + len(new), dtype=np.int32)
            self.pair_nos.extend(new.tolist())
            at = np.searchsorted(self._sorted, new)
            self._sorted = np.insert(self._sorted, at, new)
            self._sorted_dense = np.insert(self._sorted_dense, at, dense_new)
        return dense

    def _cover(self, low: int, high: int, incoming: int) -> bool:
        """Make the table span [low, high] too; False (and the sorted copy from now on) when that range would
        be too wide for the pairs known with at most ``incoming`` new ones."""
        table = self._table
        assert table is not None
        if len(table) and self._base <= low and high < self._base + len(table):
            return True
        start = min(low, self._base) if len(table) else low
        stop = max(high + 1, self._base + len(table)) if len(table) else high + 1
        if stop - start > self.TABLE_SLOTS_PER_PAIR * (len(self.pair_nos) + incoming) + self.TABLE_MIN_SLOTS:
            known = np.asarray(self.pair_nos, dtype=np.int64)
            order = np.argsort(known, kind="stable")
            self._sorted, self._sorted_dense = known[order], order.astype(np.int32)
            self._table = None
            return False
        # Room above for the pairs saved next (their numbers only grow): a quarter more, at most.
        headroom = min((stop - start) // 4, self.TABLE_MIN_SLOTS)
        grown = np.full(stop - start + headroom, -1, dtype=np.int32)
        if len(table):
            grown[self._base - start:self._base - start + len(table)] = table
        self._table, self._base = grown, start
        return True


@dataclass(frozen=True)
class _Listing:
    """A word's blocks as the database has them now: (block, version, sent) in block order, and the postings
    of the blocks sent, joined in that order."""

    blocks: list[tuple[int, tuple[int, int], bool]]
    pair_nos: np.ndarray
    term_frequencies: np.ndarray
    pair_lengths: np.ndarray

    @classmethod
    def empty(cls) -> _Listing:
        return cls([], np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.float32))


@dataclass(frozen=True)
class _Word:
    """A word's postings, its blocks joined. ``blocks`` maps a block to its version (xmin, posting count)
    and its slice of the arrays, so a changed block is replaced without reading the others again."""

    version: tuple[int, int]  # its user_lexemes row's (xmin, pair_count): see lexical_query_words.sql
    blocks: dict[int, tuple[tuple[int, int], int, int]]
    dense: np.ndarray  # int32 indexes into the user's pair numbers
    term_frequencies: np.ndarray  # float32
    pair_lengths: np.ndarray  # float32
    # A posting's BM25 weight (k1 and b of retrieval/signals.py, which the statement is given too) is
    # idf x numerator / (base + slope / average length): four vector operations a query instead of eight.
    numerator: np.ndarray
    base: np.ndarray
    slope: np.ndarray

    @property
    def postings(self) -> int:
        return len(self.dense)

    @classmethod
    def joined(cls, version: tuple[int, int],
               parts: list[tuple[int, tuple[int, int], np.ndarray, np.ndarray, np.ndarray]]) -> _Word:
        """From (block, block version, dense indexes, term frequencies, pair lengths) in block order."""
        blocks, start = {}, 0
        for block_no, block_version, dense, _, _ in parts:
            blocks[block_no] = (block_version, start, start + len(dense))
            start += len(dense)
        dense = _concat([part[2] for part in parts], np.int32)
        term_frequencies = _concat([part[3] for part in parts], np.float32)
        pair_lengths = _concat([part[4] for part in parts], np.float32)
        tf = term_frequencies.astype(np.float64)
        return cls(version, blocks, dense, term_frequencies, pair_lengths, numerator=tf * (BM25_K1 + 1),
                   base=tf + BM25_K1 * (1 - BM25_B), slope=BM25_K1 * BM25_B * pair_lengths.astype(np.float64))

    def block(self, block_no: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _, start, stop = self.blocks[block_no]
        return self.dense[start:stop], self.term_frequencies[start:stop], self.pair_lengths[start:stop]

    def weights(self, idf: float, average_length: float) -> np.ndarray:
        return idf * self.numerator / (self.base + self.slope / average_length)


def top_k_indexes(scores: np.ndarray, k: int, slack: float = SCORE_SLACK) -> np.ndarray:
    """Indexes of the scores at or above (1 - slack) x the k-th best positive score (every positive score
    when there are k or fewer): the top k with every tie at the cut, and a margin for rounding."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) <= k:
        return positive
    values = scores[positive]
    kth = np.partition(values, len(values) - k)[len(values) - k]
    return positive[values >= kth * (1 - slack)]


class WordPostingsCache:
    """Word postings of the users recalled, held in this process; thread-safe. See the module docstring."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be at least 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._words: OrderedDict[tuple, _Word] = OrderedDict()  # (server, database, user, kg, word): LRU order
        self._users: dict[tuple, _UserPairs] = {}
        self._user_words: Counter[tuple] = Counter()  # words held per user entry
        self._bytes = 0
        self._forgets_seen: dict[tuple, tuple] = {}  # (server, database) -> (last erasure, last forget) seen

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return self._bytes + sum(_user_bytes(pairs) for pairs in self._users.values())

    def pool_pairs(self, conn: psycopg.Connection, *, user_id: str, kg_id: str, query_text: str, k: int
                   ) -> list[int]:
        """The pair numbers of the exact BM25 top ``k`` of the user's pairs for ``query_text`` (with every
        tie at the cut and a rounding margin: the statement cuts at k), from current postings."""
        if k <= 0:
            return []
        rows = conn.execute(load_sql("retrieval/lexical_query_words"),
                            {"user_id": user_id, "kg_id": kg_id, "query_text": query_text}).fetchall()
        # Keyed by the server's start and the database: another cluster, or a database made anew, can
        # reuse word ids and transaction ids, never both with the same key.
        user_key = (rows[0]["server_started"], rows[0]["database_oid"], user_id, kg_id)
        self._drop_forgotten(user_key[:2], rows[0]["last_erasure"], rows[0]["last_forget"])
        rows = [row for row in rows if row["lexeme_id"] is not None]
        if not rows:
            return []
        versions = {row["lexeme_id"]: (row["version"], row["pair_count"]) for row in rows}
        listing: dict[int, _Listing] = {}
        for attempt in range(3):
            # What another thread evicts between the two steps below is read again; the third time every
            # word is read whole (nothing held is relied on), which cannot miss.
            stale, held = self._stale_words(user_key, versions, listing, trust_held=attempt < 2)
            if stale:
                listing.update(self._fetch(conn, user_id=user_id, kg_id=kg_id, words=stale, held=held))
            updated = self._update(user_key, versions, listing)
            if updated is not None:
                break
        words, pair_nos, known = updated
        dense, weights = [], []
        for row in rows:
            word = words[row["lexeme_id"]]
            if word.postings:
                dense.append(word.dense)
                weights.append(word.weights(row["idf"], row["average_length"]))
        if not dense:
            return []
        scores = np.bincount(np.concatenate(dense), weights=np.concatenate(weights), minlength=known)
        return [pair_nos[index] for index in top_k_indexes(scores, k).tolist()]

    def clear(self) -> None:
        """Drop everything held (the next recall of each user reads its words' postings again)."""
        with self._lock:
            self._words.clear()
            self._users.clear()
            self._user_words.clear()
            self._bytes = 0

    def holds_user(self, user_id: str) -> bool:
        """Whether anything of ``user_id`` (in any graph) is held."""
        with self._lock:
            return any(key[2] == user_id for key in self._users)

    def _drop_forgotten(self, database_key: tuple, last_erasure: int | None, last_forget: int | None) -> None:
        """Drop everything held once an erasure happened since the last look, and the process's cached subject
        names once any forget did (the module docstring's Forgetting)."""
        with self._lock:
            seen = self._forgets_seen.get(database_key)
            self._forgets_seen[database_key] = (last_erasure, last_forget)
        if seen is None:
            return
        if seen[0] != last_erasure:
            self.clear()
        if seen[1] != last_forget:
            forget_cached_texts()

    # -- the cache --------------------------------------------------------------------------------
    def _stale_words(self, user_key: tuple, versions: dict[int, tuple[int, int]], listing: dict[int, _Listing],
                     *, trust_held: bool) -> tuple[list[int], list[tuple[int, int, int]]]:
        """Words not held at their current version (and not listed yet), and the blocks held of them
        (word, block, xmin), whose postings the database need not send again."""
        if not trust_held:
            return list(versions), []
        stale: list[int] = []
        held: list[tuple[int, int, int]] = []
        with self._lock:
            for lexeme_id, version in versions.items():
                word = self._words.get((*user_key, lexeme_id))
                if word is not None and word.version == version:
                    continue
                if lexeme_id in listing:
                    continue
                stale.append(lexeme_id)
                if word is not None:
                    held.extend((lexeme_id, block_no, block_version[0])
                                for block_no, (block_version, _, _) in word.blocks.items())
        return stale, held

    def _fetch(self, conn: psycopg.Connection, *, user_id: str, kg_id: str, words: Sequence[int],
               held: Sequence[tuple[int, int, int]]) -> dict[int, _Listing]:
        # Binary results: the postings come as array_send bytes (a cold common word is ~80,000 postings,
        # which as text took longer to parse than to read).
        rows = conn.execute(load_sql("retrieval/word_block_postings"),
                            {"user_id": user_id, "kg_id": kg_id, "lexeme_ids": list(words),
                             "held_lexeme_ids": [h[0] for h in held], "held_block_nos": [h[1] for h in held],
                             "held_versions": [h[2] for h in held]}, binary=True).fetchall()
        listing = {lexeme_id: _Listing.empty() for lexeme_id in words}  # a word without blocks holds nothing
        for row in rows:
            sent_counts = [count for count, sent in zip(row["posting_counts"], row["sent"], strict=True) if sent]
            listing[row["lexeme_id"]] = _Listing(
                [(block_no, (version, count), sent) for block_no, version, count, sent in
                 zip(row["block_nos"], row["versions"], row["posting_counts"], row["sent"], strict=True)],
                unpack_sent_arrays(row["pair_nos"], sent_counts, np.int64),
                unpack_sent_arrays(row["term_frequencies"], sent_counts, np.int32).astype(np.float32),
                unpack_sent_arrays(row["pair_lengths"], sent_counts, np.int32).astype(np.float32))
        return listing

    def _update(self, user_key: tuple, versions: dict[int, tuple[int, int]], listing: dict[int, _Listing]
                ) -> tuple[dict[int, _Word], list[int], int] | None:
        """Every query word's postings (listed words rebuilt from their listing, the others as held), the
        user's pair numbers their dense indexes point into and how many of those there are now; the words
        are kept within the budget. None, cache untouched, when something relied on as held was evicted
        meanwhile by another thread."""
        with self._lock:
            for lexeme_id, version in versions.items():
                word = self._words.get((*user_key, lexeme_id))
                if lexeme_id in listing:
                    if any(not sent and (word is None or word.blocks.get(block_no, (None,))[0] != block_version)
                           for block_no, block_version, sent in listing[lexeme_id].blocks):
                        return None
                elif word is None or word.version != version:
                    return None
            pairs = self._users.setdefault(user_key, _UserPairs())
            # Every sent posting's dense index in one vectorised call, then split back by word.
            listed = [lexeme_id for lexeme_id in versions if lexeme_id in listing]
            sent_dense = dict(zip(listed, _split(pairs.dense(_concat([listing[w].pair_nos for w in listed], np.int64)),
                                                 [len(listing[w].pair_nos) for w in listed]), strict=True))
            words: dict[int, _Word] = {}
            for lexeme_id, version in versions.items():
                key = (*user_key, lexeme_id)
                old = self._words.get(key)
                if lexeme_id not in listing:
                    word = old
                else:
                    # A block the listing sends is new or changed; one it names without postings is held.
                    # Held words index into this same user entry: it is dropped only with its last word.
                    # The listing is at least as new as ``version`` (read after it): a later change shows
                    # as a newer version next time and is read again then.
                    got, dense, parts, offset = listing[lexeme_id], sent_dense[lexeme_id], [], 0
                    for block_no, block_version, sent in got.blocks:
                        if sent:
                            stop = offset + block_version[1]
                            parts.append((block_no, block_version, dense[offset:stop],
                                          got.term_frequencies[offset:stop], got.pair_lengths[offset:stop]))
                            offset = stop
                        else:
                            parts.append((block_no, block_version, *old.block(block_no)))
                    if offset != len(dense):
                        raise RuntimeError(f"word {lexeme_id}: blocks' posting counts disagree with their postings")
                    word = _Word.joined(version, parts)
                words[lexeme_id] = word
                if old is not None:
                    self._bytes -= old.postings * BYTES_PER_POSTING
                    del self._words[key]
                else:
                    self._user_words[user_key] += 1
                self._words[key] = word  # most recently used last
                self._bytes += word.postings * BYTES_PER_POSTING
            # The list only grows (an index, once given, keeps its pair), so no copy is needed; its length
            # now bounds every index the words above hold.
            known = len(pairs.pair_nos)
            self._evict()
        return words, pairs.pair_nos, known

    def _evict(self) -> None:
        pair_bytes = sum(_user_bytes(pairs) for pairs in self._users.values())
        while self._words and self._bytes + pair_bytes > self.max_bytes:
            key, word = self._words.popitem(last=False)
            self._bytes -= word.postings * BYTES_PER_POSTING
            self._user_words[key[:4]] -= 1
            if not self._user_words[key[:4]]:
                del self._user_words[key[:4]]
                pair_bytes -= _user_bytes(self._users.pop(key[:4]))


def _user_bytes(pairs: _UserPairs) -> int:
    return len(pairs.pair_nos) * BYTES_PER_PAIR + pairs.nbytes


def _split(array: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    return np.split(array, np.cumsum(lengths)[:-1]) if lengths else []


def unpack_sent_arrays(data: bytes | None, counts: Sequence[int], dtype) -> np.ndarray:
    """The values of one-dimensional bigint (``np.int64``) or integer (``np.int32``) arrays without NULLs,
    each in Postgres' binary form (array_send) and joined, ``counts`` their lengths: one array of them all.

    The binary form is big-endian 4-byte words: a header of five (dimensions, NULL flag, element type,
    length, lower bound), then per element its byte length and its value (one word for integer, two for
    bigint). Every value is gathered at once; the headers are checked against ``counts``."""
    if dtype not in (np.int64, np.int32):
        raise TypeError(f"dtype must be np.int64 or np.int32, got {dtype}")
    counts = np.asarray(counts, dtype=np.int64)
    if not counts.sum():
        return np.zeros(0, dtype=dtype)
    value_words = 2 if dtype is np.int64 else 1
    stride = 1 + value_words
    words = np.frombuffer(data or b"", dtype=">u4")
    sizes = 5 + stride * counts  # each array's words: its header, then a length and a value per element
    ends = np.cumsum(sizes)
    starts = ends - sizes
    if (len(words) != int(ends[-1]) or (words[starts] != 1).any() or (words[starts + 1] != 0).any()
            or (words[starts + 3] != counts).any()):
        raise ValueError("postings are not the one-dimensional arrays without NULLs their counts describe")
    firsts = np.cumsum(counts) - counts
    # Each value's first word: past its block's header and its own length word.
    at = np.repeat(starts + 6 - stride * firsts, counts) + stride * np.arange(int(counts.sum()))
    if dtype is np.int32:
        return words[at].astype(np.uint32).view(np.int32)
    return ((words[at].astype(np.uint64) << np.uint64(32)) | words[at + 1].astype(np.uint64)).view(np.int64)


def _concat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
