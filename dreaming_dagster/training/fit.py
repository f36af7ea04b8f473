"""The ranker training step as one function: the split, the question-type classifier, the v6 … v1 models on
the hybrid pools of every memory, and the ablations: v6 trained on the pooled oracle alone (the ranker
before it met realistic haystacks), v6 without the time parts (no time-window candidates, no ``time_fit``
or ``time_text``, no window feature), v6 without the keys (no key candidates, no ``key_match``), v6 without
the key side's candidates (``key_match`` kept) and v2 on the cosine pool
alone (the ranker before lexical candidates)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreaming_dagster.retrieval.features import QUESTION_TYPES
from dreaming_dagster.retrieval.question_type import fit_classifier
from dreaming_dagster.retrieval.ranker import DEFAULT_HIDDEN
from dreaming_dagster.retrieval.signals import FUSION_WEIGHTS
from dreaming_dagster.training import locomo, realmem
from dreaming_dagster.training.baselines import model_free_scores, weighted_fusion
from dreaming_dagster.training.split import PARTS, RankerSplit, ranker_split
from dreaming_dagster.training.train import (
    TrainingData,
    TrainingOutcome,
    mean_metric,
    ndcg_by_group,
    ranking_metrics,
    train_ranker,
)
from dreaming_dagster.training.variants import (
    COSINE_POOL_VERSIONS,
    LOCOMO_MEMORY,
    ORACLE_MEMORY,
    ORACLE_ONLY,
    PART_ABLATIONS,
    PUBLISHED_VERSION,
    REALMEM_MEMORY,
    VERSIONS,
    WITHOUT_GRAPH_CANDIDATES,
    WITHOUT_KEY_CANDIDATES,
    WITHOUT_KEYS,
    WITHOUT_PEOPLE_CHAT,
    WITHOUT_TIME,
    ablation_data,
    cosine_pool_key,
)


def split_of(data: TrainingData) -> RankerSplit:
    """The ranker's split: LongMemEval's questions by id (every LongMemEval memory's questions fall in it; a
    question only another memory holds trains), LoCoMo's by conversation and RealMem's by persona."""
    by_conversation = {LOCOMO_MEMORY: locomo.part_of, REALMEM_MEMORY: realmem.part_of}
    oracle = [i for i, memory in enumerate(data.memories) if memory == ORACLE_MEMORY] or [
        i for i, memory in enumerate(data.memories) if memory not in by_conversation]
    split = ranker_split([data.question_ids[i] for i in oracle], [data.longmemeval_types[i] for i in oracle])
    conversations: dict[str, list[str]] = {}
    for question_id, memory in zip(data.question_ids, data.memories, strict=True):
        if memory in by_conversation:
            conversations.setdefault(by_conversation[memory](question_id) or "train", []).append(question_id)
    return split.with_questions(conversations)


def part_rows(data: TrainingData, split: RankerSplit) -> dict[str, list[int]]:
    """train / dev / validation / test → rows of ``data`` (every memory)."""
    parts: dict[str, list[int]] = {name: [] for name in PARTS}
    for row, question_id in enumerate(data.question_ids):
        parts[split.part_of(question_id) or "train"].append(row)
    return parts


def simplicity(hidden: Sequence[int]) -> tuple[int, int]:
    """Smaller is simpler: fewer layers, then fewer units."""
    return len(hidden), sum(hidden)


@dataclass
class FitReport:
    outcomes: dict[str, TrainingOutcome]
    split: RankerSplit
    predicted_types: dict[str, str]  # by question id (the same text in every memory)
    classifier_dev_accuracy: float
    # Dev NDCG@10 of the rankings without a model (cosine over its own pool; BM25 and the cosine+BM25
    # fusion over the hybrid pool), over every dev question and by distribution ({memory: {ordering: NDCG@10}}).
    model_free_dev_ndcg10: dict[str, float] = field(default_factory=dict)
    model_free_dev_by_memory: dict[str, dict[str, float]] = field(default_factory=dict)
    hidden: tuple[int, ...] = DEFAULT_HIDDEN  # the network chosen on dev
    # each network tried → its v6's worst-distribution dev gain, one a seed
    hidden_dev_gain: dict[str, list[float]] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    # the chosen network with all its parts, and without each part recall could drop → worst dev gain, one a seed
    part_dev_gain: dict[str, list[float]] = field(default_factory=dict)
    # recall's order with no usable model, cos + w × lex: each weight tried → {memory: dev NDCG@10}
    fallback_dev_ndcg10: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def fallback_weight(self) -> float | None:
        """The fusion weight whose worst distribution scores best on dev."""
        scores = self.fallback_dev_ndcg10
        return float(max(scores, key=lambda w: min(scores[w].values()))) if scores else None

    @property
    def part_verdicts(self) -> dict[str, str]:
        """Each part an ablation drops → "pays", "costs" or "tie": the full model's mean worst-distribution dev
        gain against the model without the part, a difference within the seed spread being a tie."""
        return {key: part_verdict(self.part_dev_gain[PUBLISHED_VERSION], gains)
                for key, gains in self.part_dev_gain.items() if key != PUBLISHED_VERSION}

    @property
    def bars(self) -> dict[str, tuple[str, float]]:
        """Each distribution's best ranking without a model on its dev questions: memory → (name, NDCG@10)."""
        return {memory: max(scores.items(), key=lambda item: (item[1], item[0]))
                for memory, scores in self.model_free_dev_by_memory.items()}

    @property
    def bar(self) -> tuple[str, float]:
        """The best ranking without a model on every dev question together: (name, NDCG@10)."""
        scores = self.model_free_dev_ndcg10
        best = max(scores, key=lambda name: (scores[name], name))
        return best, scores[best]

    @property
    def train_ids(self) -> list[str]:
        return list(self.split.train)

    @property
    def validation_ids(self) -> list[str]:
        return list(self.split.validation)

    def as_json(self) -> dict:
        return {"train_ids": list(self.split.train), "dev_ids": list(self.split.dev),
                "validation_ids": list(self.split.validation), "test_ids": list(self.split.test),
                "predicted_types": self.predicted_types, "classifier_dev_accuracy": self.classifier_dev_accuracy,
                "model_free_dev_ndcg@10": self.model_free_dev_ndcg10,
                "model_free_dev_ndcg@10_by_memory": self.model_free_dev_by_memory,
                "bar": {"ranking": self.bar[0], "dev_ndcg@10": self.bar[1]},
                "bars": {memory: {"ranking": name, "dev_ndcg@10": value} for memory, (name, value) in self.bars.items()},
                "hidden": list(self.hidden), "seeds": list(self.seeds), "hidden_dev_gain": self.hidden_dev_gain,
                "part_dev_gain": self.part_dev_gain, "parts": self.part_verdicts,
                "fallback": {"dev_ndcg@10": self.fallback_dev_ndcg10, "chosen_lex_weight": self.fallback_weight},
                "models": {v: {"best_epoch": o.best_epoch, "best_dev_ndcg@10": o.best_dev_ndcg10,
                               "best_dev_gain": o.best_dev_gain, "history": o.history}
                           for v, o in self.outcomes.items()}}


def part_verdict(with_part: Sequence[float], without_part: Sequence[float]) -> str:
    """"pays" when the mean gain with a part beats the mean without it by more than the seed spread (the larger
    range of the two), "costs" when it falls short by more, else "tie" (which goes to the simpler model)."""
    spread = max(max(with_part) - min(with_part), max(without_part) - min(without_part))
    difference = float(np.mean(with_part) - np.mean(without_part))
    return "pays" if difference > spread else "costs" if difference < -spread else "tie"


def choose_hidden(gains: dict[tuple[int, ...], list[float]]) -> tuple[int, ...]:
    """The network with the best mean worst-distribution gain over the seeds — or the simplest network whose mean
    is within the seed spread (the largest range of one network's seeds) of it: a difference that small is a tie."""
    means = {choice: float(np.mean(values)) for choice, values in gains.items()}
    spread = max((max(values) - min(values) for values in gains.values()), default=0.0)
    best = max(means.values())
    return min((choice for choice, mean in means.items() if best - mean <= spread), key=simplicity)


def fit_rankers(data: TrainingData, *, embedding_model: str, seed: int = 0, epochs: int = 50,
                learning_rate: float = 1e-3, temperature: float = 0.05, batch_size: int = 32,
                hidden_choices: Sequence[Sequence[int]] = (DEFAULT_HIDDEN,), seeds: Sequence[int] | None = None,
                ablations: bool = True, log: Callable[[str], None] = print) -> FitReport:
    """Train v6 … v1 on gold question types over the training questions of every memory. Each model's best epoch
    and the network (of ``hidden_choices``, each trained with every one of ``seeds``) are chosen by the worst
    distribution's dev NDCG@10 gain over its best ordering without a model; the published models are trained
    with ``seed``. Every question's type is predicted by a classifier fitted on the training questions only
    (so dev, validation and test predictions are honest)."""
    seeds = tuple(seeds) if seeds else (seed,)
    split = split_of(data)
    parts = part_rows(data, split)
    train_rows, dev_rows = parts["train"], parts["dev"]
    classifier = fit_classifier(data.embeddings[train_rows], [data.ranker_types[i] for i in train_rows],
                                embedding_model=embedding_model, seed=seed)
    predicted = [QUESTION_TYPES[i] for i in classifier.probabilities(data.embeddings).argmax(axis=1)]
    accuracy = float(np.mean([predicted[i] == data.ranker_types[i] for i in dev_rows])) if dev_rows else float("nan")
    cosine_pool = data.vector_pool()
    dev_groups = {memory: [row for row in dev_rows if data.memories[row] == memory]
                  for memory in sorted(set(data.memories))}
    dev_groups = {memory: rows for memory, rows in dev_groups.items() if rows}
    model_free, by_memory = {}, {memory: {} for memory in dev_groups}
    for name, scores in model_free_scores(data.signals[dev_rows], data.mask[dev_rows]).items():
        metrics = ranking_metrics(cosine_pool if name == "cosine" else data, scores, dev_rows)
        model_free[name] = mean_metric(metrics, "ndcg@10")
        for memory, value in ndcg_by_group(metrics, dev_rows, dev_groups).items():
            by_memory[memory][name] = value
    bars = {memory: max(scores.values()) for memory, scores in by_memory.items()}
    fallback = {str(weight): ndcg_by_group(ranking_metrics(data, weighted_fusion(data.signals[dev_rows], weight),
                                                           dev_rows), dev_rows, dev_groups)
                for weight in FUSION_WEIGHTS}
    log(f"{len(train_rows)} training / {len(dev_rows)} dev questions over {', '.join(dev_groups)}; dev NDCG@10 "
        "without a model: " + "; ".join(f"{memory} " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
                                        for memory, scores in by_memory.items())
        + f"; question-type accuracy on dev {accuracy:.3f}")
    common = dict(epochs=epochs, learning_rate=learning_rate, temperature=temperature, batch_size=batch_size,
                  dev_groups=dev_groups, dev_bars=bars)
    tried: dict[tuple[tuple[int, ...], int], TrainingOutcome] = {}
    for choice in map(tuple, hidden_choices):
        for each_seed in seeds:
            tried[choice, each_seed] = train_ranker(data, data.features(data.ranker_types), train_rows, dev_rows,
                                                    version=PUBLISHED_VERSION, seed=each_seed, hidden=choice, **common)
            log(f"{PUBLISHED_VERSION} with hidden layers {list(choice)}, seed {each_seed}: worst dev gain "
                f"{tried[choice, each_seed].best_dev_gain:+.4f}")
    gains = {choice: [tried[choice, s].best_dev_gain for s in seeds] for choice in map(tuple, hidden_choices)}
    hidden = choose_hidden(gains)
    runs = [(version, version, train_rows) for version in VERSIONS]
    if ablations:
        oracle_train = [row for row in train_rows if data.memories[row] == ORACLE_MEMORY]
        if len(set(data.memories)) > 1 and oracle_train:
            runs.append((ORACLE_ONLY, PUBLISHED_VERSION, oracle_train))
        if LOCOMO_MEMORY in data.memories:
            runs.append((WITHOUT_PEOPLE_CHAT, PUBLISHED_VERSION,
                         [row for row in train_rows if data.memories[row] != LOCOMO_MEMORY]))
        if data.side_masks.get("window") is not None and data.side_masks["window"].any():
            runs.append((WITHOUT_TIME, PUBLISHED_VERSION, train_rows))
        runs.append((WITHOUT_KEYS, PUBLISHED_VERSION, train_rows))
        runs.append((WITHOUT_KEY_CANDIDATES, PUBLISHED_VERSION, train_rows))
        if data.side_masks.get("graph") is not None and data.side_masks["graph"].any():
            runs.append((WITHOUT_GRAPH_CANDIDATES, PUBLISHED_VERSION, train_rows))
        if cosine_pool is not data:
            runs += [(cosine_pool_key(version), version, train_rows) for version in COSINE_POOL_VERSIONS]
    outcomes = {PUBLISHED_VERSION: tried[hidden, seed] if (hidden, seed) in tried else tried[hidden, seeds[0]]}
    part_gains: dict[str, list[float]] = {PUBLISHED_VERSION: gains[hidden]}
    for key, version, rows in runs:
        if key in outcomes:
            continue
        pools = ablation_data(data, key)

        def report(row, key=key):
            if row["epoch"] == 1 or row["epoch"] % 10 == 0 or row["epoch"] == epochs:
                log(f"{key} epoch {row['epoch']}/{epochs}: loss {row['loss']:.4f} · train NDCG@10 "
                    f"{row['train_ndcg@10']:.4f} · dev NDCG@10 {row['dev_ndcg@10']:.4f}")
        features = pools.features(pools.ranker_types)
        outcomes[key] = train_ranker(pools, features, rows, dev_rows, version=version, seed=seed, hidden=hidden,
                                     on_epoch=report, **common)
        if key in PART_ABLATIONS:  # a part is kept only if it pays beyond the seeds' spread: every seed decides
            part_gains[key] = [outcomes[key].best_dev_gain if each_seed == seed else
                               train_ranker(pools, features, rows, dev_rows, version=version, seed=each_seed,
                                            hidden=hidden, **common).best_dev_gain for each_seed in seeds]
            log(f"{key}: worst dev gain by seed " + ", ".join(f"{gain:+.4f}" for gain in part_gains[key]))
    outcomes = {key: outcomes[key] for key, _, _ in runs}  # in the order of the runs
    return FitReport(outcomes=outcomes, split=split,
                     predicted_types=dict(zip(data.question_ids, predicted, strict=True)),
                     classifier_dev_accuracy=accuracy, model_free_dev_ndcg10=model_free,
                     model_free_dev_by_memory=by_memory, hidden=hidden, seeds=seeds, fallback_dev_ndcg10=fallback,
                     hidden_dev_gain={str(list(choice)): values for choice, values in gains.items()},
                     part_dev_gain=part_gains if len(part_gains) > 1 else {})
