"""The twelve ranking signals, their names and order, and a plain-Python reference implementation.

Serving computes the signals in one SQL statement (``sql/queries/retrieval/composite_ranking.sql``);
this module states the same definitions in Python so the SQL can be checked against them (tests compare
the two to 1e-6) and so the definitions read in one place. Every signal is in [0, 1]:

- ``cos``: cosine similarity of the query and the pair — the better of the pair's two vectors (its user
  turn and its assistant turn, migration 0009) — clamped at 0;
- ``rec_lin``: the pair's time, min–max scaled inside the pool (1 when the pool spans no time);
- ``rec_exp``: 0.5 ** (age_days / 14), age measured from the reference time (as_of or now), never negative,
  the exponent capped at 1,000 half-lives (older pairs are ~0 and would underflow float8);
- ``subj_freq``: the sum over the pair's live subjects of link count (links to pairs before as_of) ×
  specificity (hubs.py: ln(N/n)/ln(N) over the user's N pairs, 0 for a hub), divided by the
  pool's maximum (0 when no candidate has subjects);
- ``subj_sem``: the highest cosine between the query and one of the pair's subjects that is not a hub (0
  without such subjects);
- ``sess``: 1 when the pair belongs to the caller's current session;
- ``neighbor_density``: the other candidates sharing a subject with the pair, each counted by the
  specificity of the most specific subject they share, divided by the pool's maximum (0 when no two
  candidates share a subject that is not a hub);
- ``lex``: the pair's BM25 score for the query over the user's lexical index, divided by the pool's
  maximum (0 when no candidate shares a word with the query);
- ``time_fit``: how well the pair's times — the day it was said and the times its user turn mentions
  (pipeline/dating.py) — fit the question's time window (dates/questions.py): the best :func:`range_fit`
  over them, each mention's by its certainty, times the window's certainty; 0 for every pair when the
  question names no time;
- ``key_match``: the highest cosine between the query and one of the pair's index keys (extraction/keys.py:
  what the user states about themselves, dated events), clamped at 0; 0 without keys;
- ``session_match``: the highest ``cos`` among the candidates of the pair's session (the pair's own when it
  has no session): a turn of a session that holds the best match is likely part of the answer;
- ``time_text``: ``time_fit`` from the times the pair's user turn mentions alone (0 without a window or
  mentions): beside ``time_fit``, whether a pair's time comes from what it says or from the day it was said.

BM25 (:func:`bm25`): for each distinct query lexeme t the pair holds, idf(t) · tf·(k1+1) / (tf + k1·(1 − b
+ b·len/avg_len)), with idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5)); N, df and avg_len are the user's.
Lexemes are Postgres' 'english' text-search lexemes; the SQL tokenizes, this module only scores.

The pool the signals are computed over is the union of the top candidates by cosine, by BM25, through the
graph, through index keys and from inside the question's time window, so a pair found by any one side has
all twelve signals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

import numpy as np

from dreaming_dagster.dates.questions import MARGIN_DAYS
from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule

SIGNAL_NAMES: tuple[str, ...] = ("cos", "rec_lin", "rec_exp", "subj_freq", "subj_sem", "sess", "neighbor_density",
                                  "lex", "time_fit", "key_match", "session_match", "time_text")
V5_SIGNAL_NAMES: tuple[str, ...] = SIGNAL_NAMES[:10]
V4_SIGNAL_NAMES: tuple[str, ...] = SIGNAL_NAMES[:9]
V3_SIGNAL_NAMES: tuple[str, ...] = SIGNAL_NAMES[:8]
V2_SIGNAL_NAMES: tuple[str, ...] = SIGNAL_NAMES[:7]
V1_SIGNAL_NAMES: tuple[str, ...] = ("cos", "rec_lin", "subj_freq")
REC_EXP_HALF_LIFE_DAYS = 14.0
# rec_exp stops at 0.5^1000 (~1e-301, a pair ~38 years old): Postgres float8 underflows past ~0.5^1074.
REC_EXP_MAX_HALF_LIVES = 1000.0
BM25_K1 = 1.2
BM25_B = 0.75
# Cosine alone orders the pools the ranker is trained on. Recall with no model it can use (another embedder's
# vectors) orders by a fusion of cosine and BM25: cos + LEX_WEIGHT × lex, the weight of FUSION_WEIGHTS whose
# worst distribution scores best on the dev questions (`make bench-longmemeval`, "fallback" in its result);
# when the question names a time, time_fit at TIME_WEIGHT is added (chosen on the training split of `make
# bench-time`: Recall@10 of its questions with a time expression by weight).
COSINE_WEIGHTS: tuple[float, ...] = (1.0,) + (0.0,) * (len(SIGNAL_NAMES) - 1)
FUSION_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
LEX_WEIGHT = 0.5
TIME_WEIGHT = 0.5
FUSION: tuple[float, ...] = tuple(LEX_WEIGHT if name == "lex" else weight
                                  for name, weight in zip(SIGNAL_NAMES, COSINE_WEIGHTS, strict=True))
FUSION_AND_TIME: tuple[float, ...] = tuple(TIME_WEIGHT if name == "time_fit" else weight
                                           for name, weight in zip(SIGNAL_NAMES, FUSION, strict=True))


def expand_weights(weights: Sequence[float], signal_names: Sequence[str]) -> list[float]:
    """Weights over a subset of signals (a v1 model's three, a v2's seven) as the full vector the SQL takes."""
    unknown = set(signal_names) - set(SIGNAL_NAMES)
    if unknown:
        raise ValueError(f"unknown signal names {sorted(unknown)}; known: {list(SIGNAL_NAMES)}")
    if len(weights) != len(signal_names):
        raise ValueError(f"{len(weights)} weights for {len(signal_names)} signals")
    by_name = dict(zip(signal_names, weights, strict=True))
    return [float(by_name.get(name, 0.0)) for name in SIGNAL_NAMES]


def range_fit(a_first: date, a_last: date, a_margin: float, w_first: date, w_last: date, w_margin: float) -> float:
    """How well a time (days ``a_first``..``a_last``, soft edge ``a_margin`` days) fits a window: the share of
    its days inside the window when they overlap, else 1 falling to 0 over the two soft edges (the SQL
    function range_fit, migration 0026)."""
    overlap = (min(a_last, w_last) - max(a_first, w_first)).days + 1
    if overlap > 0:
        return overlap / ((a_last - a_first).days + 1)
    gap = max((w_first - a_last).days, (a_first - w_last).days)
    return max(0.0, 1.0 - gap / max(a_margin + w_margin, 1e-9))


def time_text(times: Sequence[TimeRange], window: TimeRange | None) -> float:
    """A pair's ``time_text`` for a question's ``window``: the best fit of its mentioned ``times`` alone."""
    if window is None or not times:
        return 0.0
    margin = MARGIN_DAYS[window.granularity]
    fits = [t.certainty * range_fit(t.first_day, t.last_day, MARGIN_DAYS[t.granularity], window.first_day,
                                    window.last_day, margin) for t in times]
    return min(max(max(fits) * window.certainty, 0.0), 1.0)


def time_fit(occurred_at: datetime, times: Sequence[TimeRange], window: TimeRange | None) -> float:
    """A pair's ``time_fit`` for a question's ``window``: its own UTC day and its mentioned ``times``."""
    if window is None:
        return 0.0
    margin = MARGIN_DAYS[window.granularity]
    day = occurred_at.astimezone(UTC).date()
    said = range_fit(day, day, MARGIN_DAYS["day"], window.first_day, window.last_day, margin)
    return max(min(max(said * window.certainty, 0.0), 1.0), time_text(times, window))


@dataclass(frozen=True)
class PoolPair:
    """One candidate as the reference implementation needs it."""

    pair_id: str
    session_id: str
    occurred_at: datetime
    embedding: np.ndarray | None  # None while the pair's embedding is pending (cos is then 0)
    reply_embedding: np.ndarray | None = None  # the assistant turn's vector, when both turns have text


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def pair_similarity(query: np.ndarray, pair: PoolPair) -> float:
    """The better cosine of the pair's vectors (0 when it has none yet)."""
    vectors = [v for v in (pair.embedding, pair.reply_embedding) if v is not None]
    return max((_cosine(query, v) for v in vectors), default=0.0)


def bm25(query_lexemes: Sequence[str], pair_lexemes: Mapping[str, int], *, document_frequency: Mapping[str, int],
         pair_count: int, average_length: float, k1: float = BM25_K1, b: float = BM25_B) -> float:
    """BM25 of one pair (its lexeme → term frequency) for a query's lexemes, with the user's statistics."""
    length = sum(pair_lexemes.values())
    score = 0.0
    for lexeme in set(query_lexemes):
        tf = pair_lexemes.get(lexeme, 0)
        if tf:
            df = document_frequency[lexeme]
            idf = math.log(1 + (pair_count - df + 0.5) / (df + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average_length))
    return score


def reference_signals(query: np.ndarray, pool: Sequence[PoolPair], *,
                      pair_subjects: Mapping[str, Sequence[str]],
                      subject_embeddings: Mapping[str, np.ndarray | None],
                      subject_link_counts: Mapping[str, int],
                      reference_time: datetime, session_id: str | None,
                      lexical_scores: Mapping[str, float] | None = None, user_pairs: int = 0,
                      hubs: HubRule = DEFAULT_HUB_RULE, window: TimeRange | None = None,
                      pair_times: Mapping[str, Sequence[TimeRange]] | None = None,
                      pair_keys: Mapping[str, Sequence[np.ndarray]] | None = None) -> dict[str, dict[str, float]]:
    """The twelve signals of every pool pair, by pair id, computed the slow and obvious way.

    ``pair_subjects`` maps a pair to its live subjects; ``subject_link_counts`` counts each subject's
    links (to pairs before as_of); ``lexical_scores`` is each pair's BM25 (:func:`bm25`; missing means 0);
    ``user_pairs`` is the user's whole memory (N of the subjects' specificity); ``pool`` is the candidate
    pool already chosen; ``window`` the question's time window and ``pair_times`` each pair's mentioned times;
    ``pair_keys`` each pair's key vectors.
    """
    if not pool:
        return {}
    epochs = {p.pair_id: p.occurred_at.timestamp() for p in pool}
    lo, hi = min(epochs.values()), max(epochs.values())

    def specificity(subject: str) -> float:
        return hubs.specificity(subject_link_counts.get(subject, 0), user_pairs)

    links = {p.pair_id: float(sum(subject_link_counts.get(s, 0) * specificity(s)
                                  for s in pair_subjects.get(p.pair_id, ())))
             for p in pool}
    neighbors = {}
    for p in pool:
        mine = set(pair_subjects.get(p.pair_id, ()))
        neighbors[p.pair_id] = float(sum(
            max(specificity(s) for s in shared)
            for other in pool
            if other.pair_id != p.pair_id and (shared := mine & set(pair_subjects.get(other.pair_id, ())))))
    max_links, max_neighbors = max(links.values()), max(neighbors.values())
    lexical = {p.pair_id: float((lexical_scores or {}).get(p.pair_id, 0.0)) for p in pool}
    max_lexical = max(lexical.values())

    cosines = {p.pair_id: min(max(pair_similarity(query, p), 0.0), 1.0) for p in pool}
    session_best: dict[str, float] = {}
    for p in pool:
        if p.session_id is not None:
            session_best[p.session_id] = max(session_best.get(p.session_id, 0.0), cosines[p.pair_id])

    signals = {}
    for p in pool:
        age_days = max((reference_time - p.occurred_at).total_seconds(), 0.0) / 86400.0
        subject_sims = [_cosine(query, subject_embeddings[s]) for s in pair_subjects.get(p.pair_id, ())
                        if subject_embeddings.get(s) is not None and specificity(s) > 0]
        signals[p.pair_id] = {
            "cos": cosines[p.pair_id],
            "rec_lin": 1.0 if hi == lo else (epochs[p.pair_id] - lo) / (hi - lo),
            "rec_exp": 0.5 ** min(age_days / REC_EXP_HALF_LIFE_DAYS, REC_EXP_MAX_HALF_LIVES),
            "subj_freq": links[p.pair_id] / max_links if max_links else 0.0,
            "subj_sem": min(max(max(subject_sims), 0.0), 1.0) if subject_sims else 0.0,
            "sess": 1.0 if session_id is not None and p.session_id == session_id else 0.0,
            "neighbor_density": neighbors[p.pair_id] / max_neighbors if max_neighbors else 0.0,
            "lex": lexical[p.pair_id] / max_lexical if max_lexical else 0.0,
            "time_fit": time_fit(p.occurred_at, (pair_times or {}).get(p.pair_id, ()), window),
            "key_match": min(max(max((_cosine(query, k) for k in (pair_keys or {}).get(p.pair_id, ())),
                                     default=0.0), 0.0), 1.0),
            "session_match": cosines[p.pair_id] if p.session_id is None else session_best[p.session_id],
            "time_text": time_text((pair_times or {}).get(p.pair_id, ()), window),
        }
    return signals


def combined_score(signals: Mapping[str, float], weights: Sequence[float], scale: float) -> float:
    """scale × Σ wₖ·sₖ over the twelve signals (the SQL's score)."""
    return scale * sum(w * signals[name] for w, name in zip(weights, SIGNAL_NAMES, strict=True))
