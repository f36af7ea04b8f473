"""Training the encoder for memory recall: which pairs a question's vector finds, and three ways to improve it.

The data is the benchmark memories the ranker trains on (oracle, `_S`, LoCoMo, RealMem): for each answerable
question, the pairs its user held as of the question (every pair, for the pooled oracle) and which of them
are relevant. Every encoder is judged the same way — **cosine alone over the whole memory**, a pair scoring
the better of its two turns' similarities, as recall's vector side does — by NDCG@10 on each distribution's
dev and held-out questions.

- :class:`QueryAdapter` (a): a linear map on the query's MiniLM vector, residual and started at zero (so
  epoch 0 is MiniLM), trained with a multi-positive InfoNCE loss against each training question's hardest
  negatives. Stored vectors never change.
- :func:`fine_tune_encoder` (b): MiniLM itself, with low-rank (LoRA) updates of its attention and
  feed-forward weights, trained on (question, relevant pair) with in-batch and hard negatives; both sides
  are then re-embedded.
- MiniLM as it is (c): the vectors stored today.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dreaming_dagster.embeddings import Embedder, LocalMiniLMEmbedder, pair_embedding_texts
from dreaming_dagster.encoder_delta import save_delta
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training.longmemeval import BenchmarkQuestion
from dreaming_dagster.training.metrics import ndcg_at_k, recall_at_k
from dreaming_dagster.training.workspace import RankerWorkspace

HARD_NEGATIVES = 32  # per training question, the non-relevant pairs MiniLM ranks highest
TEMPERATURE = 0.05


@dataclass
class MemoryPairs:
    """One distribution's pairs (every user's, concatenated) with both vectors."""

    user_ids: np.ndarray  # [P] object
    content_hashes: list[str]
    occurred_at: np.ndarray  # [P] datetime64[us]
    user_texts: list[str]  # the embedded texts ("user: …"), as stored
    reply_texts: list[str | None]
    vectors: np.ndarray  # [P, D] the user turn's (or the only turn's) vector
    reply_vectors: np.ndarray  # [P, D]; zero where a pair has one turn
    has_reply: np.ndarray  # [P] bool
    user_messages: list[str] = field(default_factory=list)  # the raw turns, for context variants
    session_ids: list[str] = field(default_factory=list)
    subjects: list[list[str]] = field(default_factory=list)  # the subjects the dream linked to each pair


@dataclass
class RecallQuestions:
    """One distribution's answerable questions: which pairs each may see, which are relevant, and its part."""

    memory: str
    question_ids: list[str]
    parts: list[str]
    texts: list[str]
    candidates: list[np.ndarray]  # [Q] indices into pairs: the pairs the question may see
    relevant: list[np.ndarray]  # [Q] bool over candidates
    total_relevant: np.ndarray  # [Q] relevant pairs, including any its candidates lack
    pairs: MemoryPairs
    query_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # MiniLM's

    def rows(self, part: str) -> list[int]:
        return [i for i, p in enumerate(self.parts) if p == part]


def _array(vector) -> np.ndarray:
    """A pgvector value (vector or halfvec) as float32."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, np.float32)


def read_pairs(database: Database, user_ids: Sequence[str], kg_id: str) -> MemoryPairs:
    with database.connect() as conn:
        rows = conn.execute(load_sql("training/benchmark_pairs"), {"user_ids": list(user_ids), "kg_id": kg_id}).fetchall()
    dimension = len(_array(rows[0]["embedding"])) if rows else 1
    vectors = np.zeros((len(rows), dimension), np.float32)
    replies = np.zeros((len(rows), dimension), np.float32)
    has_reply = np.zeros(len(rows), bool)
    user_texts, reply_texts = [], []
    for i, row in enumerate(rows):
        first, second = pair_embedding_texts(row["user_message"], row["assistant_message"])
        user_texts.append(first)
        reply_texts.append(second)
        vectors[i] = _array(row["embedding"])
        if row["reply_embedding"] is not None:
            replies[i] = _array(row["reply_embedding"])
            has_reply[i] = True
    return MemoryPairs(user_ids=np.asarray([r["user_id"] for r in rows], object),
                       content_hashes=[r["content_hash"] for r in rows],
                       occurred_at=np.asarray([np.datetime64(r["occurred_at"].replace(tzinfo=None), "us") for r in rows]),
                       user_texts=user_texts, reply_texts=reply_texts, vectors=vectors, reply_vectors=replies,
                       has_reply=has_reply, user_messages=[r["user_message"] for r in rows],
                       session_ids=[r["session_id"] for r in rows], subjects=[list(r["subjects"]) for r in rows])


def recall_questions(database: Database, memory: str, questions: Sequence[BenchmarkQuestion],
                     users: Mapping[str, str], kg_id: str, *, historical: bool,
                     part_of: Callable[[str], str | None]) -> RecallQuestions:
    """The answerable ``questions`` of one memory with their candidate pairs (before the question's date when
    ``historical``) and labels; ``part_of`` names each question's part (train, dev, test)."""
    answerable = [q for q in questions if q.answerable]
    pairs = read_pairs(database, sorted({users[q.question_id] for q in answerable}), kg_id)
    by_user: dict[str, np.ndarray] = {}
    for user in set(pairs.user_ids.tolist()):
        by_user[user] = np.flatnonzero(pairs.user_ids == user)
    hash_index = np.asarray(pairs.content_hashes, object)
    ids, parts, texts, candidates, relevant, totals = [], [], [], [], [], []
    for q in answerable:
        members = by_user.get(users[q.question_id], np.zeros(0, np.int64))
        if historical:
            asked = np.datetime64(q.question_date.replace(tzinfo=None), "us")
            members = members[pairs.occurred_at[members] < asked]
        ids.append(q.question_id)
        parts.append(part_of(q.question_id) or "train")
        texts.append(q.question)
        candidates.append(members)
        relevant.append(np.isin(hash_index[members], list(q.relevant)))
        totals.append(len(q.relevant))
    return RecallQuestions(memory=memory, question_ids=ids, parts=parts, texts=texts, candidates=candidates,
                           relevant=relevant, total_relevant=np.asarray(totals), pairs=pairs)


def benchmark_question_sets(database: Database, ws: RankerWorkspace,
                            memories: Sequence[str] = ("oracle", "s", "locomo", "realmem")) -> list[RecallQuestions]:
    """The questions of each benchmark memory of ``memories`` whose manifest ``ws`` holds, parted as the
    ranker parts them (the oracle and `_S` by the ranker split, LoCoMo by conversation, RealMem by persona);
    their query vectors are not computed here."""
    from dreaming_dagster.training import locomo, realmem
    from dreaming_dagster.training.memory import MemoryManifest
    from dreaming_dagster.training.split import ranker_split

    paths = {"oracle": ws.memory_manifest, "s": ws.haystacks_manifest, "locomo": ws.locomo_manifest,
             "realmem": ws.realmem_manifest}
    manifests = {memory: MemoryManifest.from_json(paths[memory].read_text())
                 for memory in memories if paths[memory].is_file()}
    if "oracle" not in manifests:
        raise FileNotFoundError(f"{ws.memory_manifest} is missing: the longmemeval_memory asset writes it")
    answerable = [q for q in manifests["oracle"].questions if q.answerable]
    split = ranker_split([q.question_id for q in answerable], [q.longmemeval_type for q in answerable])
    part_of = {"oracle": split.part_of, "s": split.part_of, "locomo": locomo.part_of, "realmem": realmem.part_of}
    return [recall_questions(database, memory, manifest.questions, manifest.users, manifest.kg_id,
                             historical=manifest.mode != "one-user", part_of=part_of[memory])
            for memory, manifest in manifests.items()]


CONTEXTS = ("previous pair", "session date", "subjects")
CONTEXT_CHARACTERS = 300  # of the previous pair's user turn: the encoder reads 256 word pieces in all


def context_texts(pairs: MemoryPairs, context: str, indices: Sequence[int]) -> list[str]:
    """The first vector's text of each pair of ``indices`` with ``context`` (one of :data:`CONTEXTS`) before it:
    the previous pair's user turn in the same session, the session's date, or the pair's subjects."""
    texts = []
    for i in indices:
        text = pairs.user_texts[i]
        if context == "previous pair":
            same = i > 0 and pairs.session_ids[i - 1] == pairs.session_ids[i] and pairs.user_ids[i - 1] == pairs.user_ids[i]
            text = f"before: {pairs.user_messages[i - 1][:CONTEXT_CHARACTERS]}\n{text}" if same else text
        elif context == "session date":
            when = pairs.occurred_at[i].astype("datetime64[s]").item()
            text = f"{when:%A %d %B %Y}: {text}"
        elif context == "subjects":
            text = f"{text}\nabout: {', '.join(pairs.subjects[i])}" if pairs.subjects[i] else text
        else:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        texts.append(text)
    return texts


def needed_pairs(questions: RecallQuestions, parts: Sequence[str]) -> np.ndarray:
    """The pairs the questions of ``parts`` may see."""
    rows = [row for part in parts for row in questions.rows(part)]
    return np.unique(np.concatenate([questions.candidates[row] for row in rows])) if rows else np.zeros(0, int)


def pair_scores(query_vectors: np.ndarray, vectors: np.ndarray, reply_vectors: np.ndarray,
                has_reply: np.ndarray) -> np.ndarray:
    """[Q, P] the better of each pair's two turns' cosine similarities (vectors are unit length)."""
    scores = query_vectors @ vectors.T
    replies = np.where(has_reply[None, :], query_vectors @ reply_vectors.T, -np.inf)
    return np.maximum(scores, replies)


def cosine_metrics(questions: RecallQuestions, rows: Sequence[int], query_vectors: np.ndarray,
                   vectors: np.ndarray | None = None, reply_vectors: np.ndarray | None = None) -> dict[str, float]:
    """Mean NDCG@10 and Recall@10 of cosine alone over ``rows`` (``vectors``: re-embedded pairs, default the stored)."""
    pairs = questions.pairs
    vectors = pairs.vectors if vectors is None else vectors
    reply_vectors = pairs.reply_vectors if reply_vectors is None else reply_vectors
    ndcg, recall = [], []
    for row in rows:
        members = questions.candidates[row]
        if not len(members):
            ndcg.append(0.0)
            recall.append(0.0)
            continue
        scores = pair_scores(query_vectors[row:row + 1], vectors[members], reply_vectors[members],
                             pairs.has_reply[members])[0]
        order = np.argsort(-scores, kind="stable")
        ranked = questions.relevant[row][order].tolist()
        ndcg.append(ndcg_at_k(ranked, int(questions.total_relevant[row]), 10))
        recall.append(recall_at_k(ranked, int(questions.total_relevant[row]), 10))
    return {"ndcg@10": float(np.mean(ndcg)) if ndcg else math.nan,
            "recall@10": float(np.mean(recall)) if recall else math.nan, "questions": len(rows)}


class QueryAdapter(torch.nn.Module):
    """q ↦ normalise(q + q·W): a residual linear map on the query's vector, W started at zero."""

    def __init__(self, dimension: int):
        super().__init__()
        self.linear = torch.nn.Linear(dimension, dimension, bias=False)
        torch.nn.init.zeros_(self.linear.weight)

    def forward(self, queries: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(queries + self.linear(queries), dim=-1)

    def apply(self, queries: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self(torch.as_tensor(queries, dtype=torch.float32)).numpy()


@dataclass
class TrainingExample:
    query: np.ndarray  # [D]
    positives: np.ndarray  # [k] pair indices
    negatives: np.ndarray  # [n] pair indices
    question: int
    memory: str
    nearest_positive: int  # the relevant pair MiniLM ranks highest


def training_examples(sets: Sequence[RecallQuestions], part: str = "train", hard_negatives: int = HARD_NEGATIVES,
                      negatives_outside_evidence: bool = False) -> list[TrainingExample]:
    """Each ``part`` question with a relevant pair in reach: its relevant pairs and the non-relevant pairs
    MiniLM ranks highest for it (the hard negatives) — with ``negatives_outside_evidence``, only pairs of
    sessions holding no relevant pair (a label that marks some turns of a session leaves its other turns,
    often about the same thing, unlabelled rather than irrelevant)."""
    out = []
    for questions in sets:
        pairs = questions.pairs
        sessions = np.asarray([f"{u}\x1f{s}" for u, s in zip(pairs.user_ids, pairs.session_ids, strict=True)],
                              object) if negatives_outside_evidence else None
        for row in questions.rows(part):
            members, labels = questions.candidates[row], questions.relevant[row]
            if not labels.any():
                continue
            scores = pair_scores(questions.query_vectors[row:row + 1], pairs.vectors[members],
                                 pairs.reply_vectors[members], pairs.has_reply[members])[0]
            allowed = ~labels
            if sessions is not None:
                allowed &= ~np.isin(sessions[members], sessions[members[labels]])
            negatives = members[allowed][np.argsort(-scores[allowed], kind="stable")[:hard_negatives]]
            out.append(TrainingExample(query=questions.query_vectors[row], positives=members[labels],
                                       negatives=negatives, question=row, memory=questions.memory,
                                       nearest_positive=int(members[labels][np.argmax(scores[labels])])))
    return out


def _multi_positive_loss(scores: torch.Tensor, positive: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """−log(Σ exp(positives) / Σ exp(all)) per row, over the masked-in columns."""
    logits = scores / TEMPERATURE
    logits = logits.masked_fill(~mask, -1e9)
    return (torch.logsumexp(logits, -1) - torch.logsumexp(logits.masked_fill(~positive, -1e9), -1)).mean()


def dev_gain(sets: Sequence[RecallQuestions], baseline: Mapping[str, float],
             query_vectors: Mapping[str, np.ndarray], part: str = "dev") -> tuple[float, dict[str, float]]:
    """(the worst distribution's NDCG@10 gain over ``baseline`` on ``part``, each distribution's NDCG@10)."""
    ndcg = {q.memory: cosine_metrics(q, q.rows(part), query_vectors[q.memory])["ndcg@10"]
            for q in sets if q.rows(part)}
    return min(ndcg[m] - baseline[m] for m in ndcg), ndcg


def train_query_adapter(sets: Sequence[RecallQuestions], *, seed: int = 0, epochs: int = 8,
                        learning_rate: float = 1e-4, weight_decay: float = 1e-2, batch_size: int = 32,
                        log: Callable[[str], None] = print) -> tuple[QueryAdapter, list[dict]]:
    """Fit a :class:`QueryAdapter` on the training questions; the epoch kept is the one whose worst
    distribution gains most on dev (epoch 0, MiniLM itself, when none gains)."""
    torch.manual_seed(seed)
    examples = training_examples(sets)
    dimension = sets[0].query_vectors.shape[1]
    adapter = QueryAdapter(dimension)
    optimizer = torch.optim.AdamW(adapter.parameters(), lr=learning_rate, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    pairs_of = {q.memory: q.pairs for q in sets}
    baseline = {q.memory: cosine_metrics(q, q.rows("dev"), q.query_vectors)["ndcg@10"] for q in sets if q.rows("dev")}
    best_state, best_gain, history = copy.deepcopy(adapter.state_dict()), 0.0, [
        {"epoch": 0, "dev_gain": 0.0, **{f"dev_ndcg@10_{m}": v for m, v in baseline.items()}}]
    for epoch in range(1, epochs + 1):
        adapter.train()
        order = torch.randperm(len(examples), generator=generator).tolist()
        losses = []
        for start in range(0, len(order), batch_size):
            batch = [examples[i] for i in order[start:start + batch_size]]
            width = max(len(e.positives) + len(e.negatives) for e in batch)
            vectors = torch.zeros(len(batch), width, dimension)
            replies = torch.zeros(len(batch), width, dimension)
            has_reply = torch.zeros(len(batch), width, dtype=torch.bool)
            positive = torch.zeros(len(batch), width, dtype=torch.bool)
            mask = torch.zeros(len(batch), width, dtype=torch.bool)
            for i, e in enumerate(batch):
                pairs, members = pairs_of[e.memory], np.concatenate([e.positives, e.negatives])
                vectors[i, :len(members)] = torch.as_tensor(pairs.vectors[members])
                replies[i, :len(members)] = torch.as_tensor(pairs.reply_vectors[members])
                has_reply[i, :len(members)] = torch.as_tensor(pairs.has_reply[members])
                positive[i, :len(e.positives)] = True
                mask[i, :len(members)] = True
            queries = adapter(torch.as_tensor(np.stack([e.query for e in batch])))
            scores = torch.maximum(torch.einsum("bd,bnd->bn", queries, vectors),
                                   torch.einsum("bd,bnd->bn", queries, replies).masked_fill(~has_reply, -2.0))
            loss = _multi_positive_loss(scores, positive, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        adapter.eval()
        gain, ndcg = dev_gain(sets, baseline, {q.memory: adapter.apply(q.query_vectors) for q in sets})
        history.append({"epoch": epoch, "loss": float(np.mean(losses)), "dev_gain": gain,
                        **{f"dev_ndcg@10_{m}": v for m, v in ndcg.items()}})
        log(f"adapter seed {seed} epoch {epoch}: loss {history[-1]['loss']:.4f}, worst dev gain {gain:+.4f}")
        if gain > best_gain:
            best_gain, best_state = gain, copy.deepcopy(adapter.state_dict())
    adapter.load_state_dict(best_state)
    adapter.eval()
    return adapter, history


@dataclass
class TunedEncoder:
    """MiniLM's LoRA factors after training: layer → (A [r, in], B [out, r]), the scale, the loss per step."""

    factors: dict[str, tuple[np.ndarray, np.ndarray]]
    scale: float
    losses: list[float]

    def save(self, path: Path, metadata: Mapping[str, str] | None = None) -> None:
        save_delta(path, self.factors, self.scale, metadata)


def _turn_texts(questions: RecallQuestions, row: int, members: np.ndarray) -> list[str]:
    """For each pair of ``members``, the text of the turn MiniLM finds closer to question ``row``."""
    pairs = questions.pairs
    query = questions.query_vectors[row]
    texts = []
    for i in members:
        reply = pairs.has_reply[i] and float(query @ pairs.reply_vectors[i]) > float(query @ pairs.vectors[i])
        texts.append(pairs.reply_texts[i] if reply else pairs.user_texts[i])
    return texts


def fine_tune_encoder(sets: Sequence[RecallQuestions], *, seed: int = 0, epochs: int = 1, rank: int = 8,
                      batch_size: int = 16, hard_negatives: int = 1, max_tokens: int = 128,
                      learning_rate: float = 2e-4, limit_questions: int | None = None,
                      positive: str = "random", negatives_outside_evidence: bool = False,
                      log: Callable[[str], None] = print):
    """MiniLM with LoRA updates (rank ``rank``) of its attention and feed-forward weights, trained with
    InfoNCE: each training question against its own relevant pair (the turn closer to it), the other
    questions' pairs of the batch and ``hard_negatives`` of its hardest negatives. ``positive`` picks the
    relevant pair a step trains on: ``random`` (any) or ``nearest`` (the one MiniLM ranks highest; a label
    that marks a whole session then trains on its pair that talks of the query, not a random one of it);
    ``negatives_outside_evidence`` draws the hard negatives from sessions without a relevant pair.
    Returns the LoRA factors (what ships: encoder_delta.py) and the loss per step."""
    if positive not in ("random", "nearest"):
        raise ValueError(f"positive: {positive!r} is neither 'random' nor 'nearest'")
    from peft import LoraConfig, get_peft_model
    from sentence_transformers import SentenceTransformer

    from dreaming_dagster.embeddings import _minilm_dir

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = SentenceTransformer(str(_minilm_dir()), device="cpu")
    transformer = model[0]
    peft_model = get_peft_model(transformer.auto_model, LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["query", "key", "value", "dense"]))
    transformer.auto_model = peft_model
    model.max_seq_length = max_tokens
    examples = training_examples(sets, hard_negatives=max(hard_negatives, 0),
                                 negatives_outside_evidence=negatives_outside_evidence)
    if limit_questions is not None:
        examples = [examples[i] for i in sorted(rng.permutation(len(examples))[:limit_questions])]
    by_memory = {q.memory: q for q in sets}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    losses = []

    def encode(texts: list[str]) -> torch.Tensor:
        features = model.preprocess(texts)
        return torch.nn.functional.normalize(model(features)["sentence_embedding"], dim=-1)

    model.train()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(examples))
        for step, start in enumerate(range(0, len(order), batch_size), 1):
            batch = [examples[i] for i in order[start:start + batch_size]]
            queries, documents, targets = [], [], []
            for e in batch:
                questions = by_memory[e.memory]
                queries.append(questions.texts[e.question])
                anchor = rng.choice(e.positives) if positive == "random" else e.nearest_positive
                chosen = [anchor] + list(e.negatives[:max(hard_negatives, 0)])
                targets.append(len(documents))  # where this question's positive sits among the batch's texts
                documents += _turn_texts(questions, e.question, np.asarray(chosen))
            scores = encode(queries) @ encode(documents).T / TEMPERATURE  # [B, the batch's texts]
            targets = torch.as_tensor(targets)
            loss = torch.nn.functional.cross_entropy(scores, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            if step % 10 == 0:
                log(f"LoRA seed {seed} epoch {epoch} step {step}/{math.ceil(len(order) / batch_size)}: "
                    f"loss {np.mean(losses[-10:]):.4f}")
    factors, scale = {}, None
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            factors[name.removeprefix("base_model.model.")] = (
                module.lora_A["default"].weight.detach().numpy().copy(),
                module.lora_B["default"].weight.detach().numpy().copy())
            scale = float(module.scaling["default"])
    return TunedEncoder(factors=factors, scale=scale, losses=losses)


@contextmanager
def delta_encoder(tuned: TunedEncoder) -> Iterator[LocalMiniLMEmbedder]:
    """``tuned`` as the product would embed with it: its delta file merged into MiniLM and exported to ONNX, run by
    :class:`LocalMiniLMEmbedder` (the files are removed on leaving)."""
    with tempfile.TemporaryDirectory(prefix="dd-encoder-") as directory:
        tuned.save(Path(directory) / "encoder_delta.safetensors")
        yield LocalMiniLMEmbedder(encoder_delta=Path(directory) / "encoder_delta.safetensors",
                                  model_cache_dir=Path(directory) / "cache")


def reembedded(embedder: Embedder, questions: RecallQuestions,
               parts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query vectors, pair vectors, reply vectors) by ``embedder`` for the questions of ``parts`` and the pairs
    they may see (the other pairs' rows stay zero)."""
    rows = [row for part in parts for row in questions.rows(part)]
    needed = needed_pairs(questions, parts)
    pairs = questions.pairs
    vectors = np.zeros_like(pairs.vectors)
    replies = np.zeros_like(pairs.reply_vectors)
    if len(needed):
        vectors[needed] = embedder.embed([pairs.user_texts[i] for i in needed])
        with_reply = needed[pairs.has_reply[needed]]
        if len(with_reply):
            replies[with_reply] = embedder.embed([pairs.reply_texts[i] for i in with_reply])
    queries = np.zeros_like(questions.query_vectors)
    if rows:
        queries[rows] = embedder.embed([questions.texts[row] for row in rows])
    return queries, vectors, replies
