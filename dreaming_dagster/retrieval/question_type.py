"""Predicting a question's type at serving time, where nobody labels it.

A multinomial logistic regression over the query embedding, trained on LongMemEval's labelled questions
(its six types folded into the ranker's five, :data:`.features.LONGMEMEVAL_TYPES`). Serving needs only a
matrix product, done in numpy; training uses torch. The shipped file
(``dreaming_dagster/retrieval/models/question_type.safetensors``) is built by
``dreaming ranker train-question-type`` and records the embedding model it expects: with another
embedder, retrain it (the same command uses the configured embedder).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from dreaming_dagster.retrieval.features import QUESTION_TYPES

SHIPPED_CLASSIFIER = Path(__file__).resolve().parent / "models" / "question_type.safetensors"
FILE_FORMAT = "dreaming-question-type"


@dataclass(frozen=True)
class QuestionTypeClassifier:
    weight: np.ndarray  # (n_types, D)
    bias: np.ndarray  # (n_types,)
    embedding_model: str
    classes: tuple[str, ...] = QUESTION_TYPES
    extra: dict | None = None

    @property
    def embedding_dim(self) -> int:
        return int(self.weight.shape[1])

    def probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        logits = np.atleast_2d(embeddings).astype(np.float32) @ self.weight.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def predict(self, embedding: np.ndarray) -> str:
        return self.classes[int(np.argmax(self.probabilities(embedding)[0]))]

    def save(self, path: Path) -> Path:
        from safetensors.numpy import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"weight": np.ascontiguousarray(self.weight, dtype=np.float32),
                   "bias": np.ascontiguousarray(self.bias, dtype=np.float32)}, str(path),
                  metadata={"format": FILE_FORMAT, "embedding_model": self.embedding_model,
                            "classes": json.dumps(list(self.classes)), "extra": json.dumps(self.extra or {})})
        return path


def load_classifier(path: Path) -> QuestionTypeClassifier:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata() or {}
        if metadata.get("format") != FILE_FORMAT:
            raise ValueError(f"{path}: not a question-type classifier (format {metadata.get('format')!r})")
        classes = tuple(json.loads(metadata["classes"]))
        if classes != QUESTION_TYPES:
            raise ValueError(f"{path}: classes {list(classes)} differ from {list(QUESTION_TYPES)}")
        return QuestionTypeClassifier(weight=handle.get_tensor("weight"), bias=handle.get_tensor("bias"),
                                      embedding_model=metadata.get("embedding_model", ""), classes=classes,
                                      extra=json.loads(metadata.get("extra", "{}")))


@cache
def shipped_classifier() -> QuestionTypeClassifier | None:
    return load_classifier(SHIPPED_CLASSIFIER) if SHIPPED_CLASSIFIER.is_file() else None


def fit_classifier(embeddings: np.ndarray, labels: Sequence[str], *, embedding_model: str, seed: int = 0,
                   epochs: int = 300, weight_decay: float = 1e-3, learning_rate: float = 0.05
                   ) -> QuestionTypeClassifier:
    """Full-batch softmax regression (Adam, L2 via weight decay), deterministic for a seed."""
    import torch

    unknown = set(labels) - set(QUESTION_TYPES)
    if unknown:
        raise ValueError(f"labels {sorted(unknown)} are not question types {list(QUESTION_TYPES)}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
    y = torch.as_tensor([QUESTION_TYPES.index(label) for label in labels])
    # Class weights: preference questions are rare; unweighted, the classifier would never say it.
    counts = torch.bincount(y, minlength=len(QUESTION_TYPES)).clamp(min=1).float()
    loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (len(QUESTION_TYPES) * counts))
    weight = (torch.randn(len(QUESTION_TYPES), x.shape[1], generator=generator) * 0.01).requires_grad_()
    bias = torch.zeros(len(QUESTION_TYPES), requires_grad=True)
    optimizer = torch.optim.AdamW([weight, bias], lr=learning_rate, weight_decay=weight_decay)
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = loss_fn(x @ weight.T + bias, y)
        loss.backward()
        optimizer.step()
    return QuestionTypeClassifier(weight=weight.detach().numpy().copy(), bias=bias.detach().numpy().copy(),
                                  embedding_model=embedding_model)


def cross_validated_accuracy(embeddings: np.ndarray, labels: Sequence[str], *, embedding_model: str,
                             folds: int = 5, seed: int = 0) -> tuple[float, dict[str, float]]:
    """Accuracy over stratified folds (each question predicted by a model that never saw it), overall and
    per type."""
    labels = list(labels)
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(labels), dtype=int)
    for question_type in QUESTION_TYPES:
        members = np.flatnonzero(np.asarray(labels) == question_type)
        rng.shuffle(members)
        fold_of[members] = np.arange(len(members)) % folds
    predicted = [""] * len(labels)
    for fold in range(folds):
        train = np.flatnonzero(fold_of != fold)
        test = np.flatnonzero(fold_of == fold)
        model = fit_classifier(embeddings[train], [labels[i] for i in train], embedding_model=embedding_model,
                               seed=seed)
        for i, p in zip(test, model.probabilities(embeddings[test]).argmax(axis=1), strict=True):
            predicted[i] = QUESTION_TYPES[p]
    correct = np.asarray(predicted) == np.asarray(labels)
    per_type = {t: float(correct[np.asarray(labels) == t].mean()) for t in QUESTION_TYPES if t in labels}
    return float(correct.mean()), per_type


@dataclass(frozen=True)
class ClassifierReport:
    questions: int
    accuracy: float
    per_type: dict[str, float]
    path: Path


def train_from_longmemeval(dataset: Path, embedder, out: Path, *, seed: int = 0) -> ClassifierReport:
    """Train on every question of a LongMemEval-format file, report 5-fold cross-validated accuracy, and
    write the classifier (fitted on all questions) to ``out``."""
    from dreaming_dagster.ingest.readers import iter_longmemeval_questions
    from dreaming_dagster.retrieval.features import question_type_of

    texts, labels = [], []
    for question in iter_longmemeval_questions(Path(dataset)):
        texts.append(str(question["question"]))
        labels.append(question_type_of(question["question_type"]))
    if not texts:
        raise ValueError(f"{dataset}: no questions")
    embeddings = np.asarray(embedder.embed(texts), dtype=np.float32)
    model_name = embedder.spec.model
    accuracy, per_type = cross_validated_accuracy(embeddings, labels, embedding_model=model_name, seed=seed)
    model = fit_classifier(embeddings, labels, embedding_model=model_name, seed=seed)
    counts = {t: labels.count(t) for t in QUESTION_TYPES}
    model = QuestionTypeClassifier(weight=model.weight, bias=model.bias, embedding_model=model_name, extra={
        "trained_on": Path(dataset).name, "questions": len(texts), "per_type_count": counts,
        "cv_accuracy": round(accuracy, 4), "cv_accuracy_per_type": {k: round(v, 4) for k, v in per_type.items()},
        "seed": seed})
    model.save(out)
    return ClassifierReport(questions=len(texts), accuracy=accuracy, per_type=per_type, path=Path(out))
