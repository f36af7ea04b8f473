"""The Composite ranker: a small torch MLP that reads the query and its situation and picks the weights
of the ranking signals (and a scale), plus its file format.

v6 reads the query embedding concatenated with the 18 features (:mod:`.features`) and outputs a softmax
over the twelve signals and a positive scale; v5 is the same network over the first ten (no
``session_match``, ``time_text``), v4 over the first nine (no ``key_match``),
v3 over the first eight (no ``time_fit``), v2 over the first seven (no ``lex``), v1 over three: ``cos``,
``rec_lin`` and ``subj_freq``. An older model gives the signals it lacks no weight (their sides still draw
candidates). Scores are ``scale × Σ wₖ·sₖ``: the scale never changes the order
inside one query, but it sets how sharply scores separate, which is what ApproxNDCG trains against, and
it keeps scores comparable across queries.

Files are safetensors (no pickle: loading a file never runs code) with metadata saying what the file is:
format, version, embedding model and dimension, signal and feature names. The loader tells v1, v2 and v3
apart by the shape of the weight head, as the reference's binary does, and refuses a file whose metadata and
shapes disagree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from dreaming_dagster.retrieval.features import FEATURE_NAMES
from dreaming_dagster.retrieval.signals import (
    COSINE_WEIGHTS,
    FUSION,
    FUSION_AND_TIME,
    SIGNAL_NAMES,
    V1_SIGNAL_NAMES,
    V2_SIGNAL_NAMES,
    V3_SIGNAL_NAMES,
    V4_SIGNAL_NAMES,
    V5_SIGNAL_NAMES,
    expand_weights,
)

FILE_FORMAT = "dreaming-composite-ranker"
SIGNALS_BY_VERSION: dict[str, tuple[str, ...]] = {"v1": V1_SIGNAL_NAMES, "v2": V2_SIGNAL_NAMES, "v3": V3_SIGNAL_NAMES,
                                                  "v4": V4_SIGNAL_NAMES, "v5": V5_SIGNAL_NAMES, "v6": SIGNAL_NAMES}
VERSION_BY_HEAD_SIZE = {len(names): version for version, names in SIGNALS_BY_VERSION.items()}
DEFAULT_HIDDEN = (128, 64)


class RankerFileError(ValueError):
    """A ranker file that cannot be used: unreadable, not a ranker, or inconsistent with itself."""


class CompositeRanker(nn.Module):
    def __init__(self, embedding_dim: int, n_signals: int, n_features: int = len(FEATURE_NAMES),
                 hidden: Sequence[int] = DEFAULT_HIDDEN):
        super().__init__()
        layers: list[nn.Module] = []
        width = embedding_dim + n_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.GELU()]
            width = size
        self.trunk = nn.Sequential(*layers)
        self.weight_head = nn.Linear(width, n_signals)
        self.scale_head = nn.Linear(width, 1)
        self.embedding_dim, self.n_features, self.n_signals = embedding_dim, n_features, n_signals

    def forward(self, query_embedding: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, D) and (batch, F) → signal weights (batch, S) summing to 1, and scale (batch,) > 0."""
        hidden = self.trunk(torch.cat([query_embedding, features], dim=-1))
        weights = torch.softmax(self.weight_head(hidden), dim=-1)
        scale = nn.functional.softplus(self.scale_head(hidden)).squeeze(-1) + 1e-3
        return weights, scale


@dataclass
class RankerFile:
    """A loaded model file: the network and what it says about itself."""

    model: CompositeRanker
    version: str
    signal_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    embedding_model: str
    path: Path | None = None
    extra: dict = field(default_factory=dict)
    load_seconds: float = 0.0

    @property
    def embedding_dim(self) -> int:
        return self.model.embedding_dim

    @property
    def name(self) -> str:
        return f"{self.version} ({self.path.name if self.path else 'in memory'})"


def save_ranker(model: CompositeRanker, path: Path, *, embedding_model: str, extra: dict | None = None) -> Path:
    """Write ``model`` as a safetensors file with self-describing metadata."""
    version = VERSION_BY_HEAD_SIZE.get(model.n_signals)
    if version is None:
        raise ValueError(f"a ranker head must have {sorted(VERSION_BY_HEAD_SIZE)} outputs, not {model.n_signals}")
    metadata = {
        "format": FILE_FORMAT,
        "version": version,
        "embedding_model": embedding_model,
        "embedding_dim": str(model.embedding_dim),
        "signal_names": json.dumps(list(SIGNALS_BY_VERSION[version])),
        "feature_names": json.dumps(list(FEATURE_NAMES)),
        "extra": json.dumps(extra or {}),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().contiguous().clone() for name, tensor in model.state_dict().items()}
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    tmp.replace(path)  # atomic: a reader never sees half a model
    return path


def load_ranker(path: Path) -> RankerFile:
    """Load a v1–v6 ranker file, telling the versions apart by the shape of the weight head."""
    started = time.perf_counter()
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except FileNotFoundError:
        raise
    except Exception as error:  # safetensors raises its own error types for corrupt headers
        raise RankerFileError(f"{path}: not a readable safetensors file ({error})") from error
    if metadata.get("format") != FILE_FORMAT:
        raise RankerFileError(f"{path}: metadata 'format' is {metadata.get('format')!r}, expected {FILE_FORMAT!r}")
    head = tensors.get("weight_head.weight")
    first = tensors.get("trunk.0.weight", head)  # a network without hidden layers reads its inputs in the head
    if head is None:
        raise RankerFileError(f"{path}: missing tensor weight_head.weight")
    version = VERSION_BY_HEAD_SIZE.get(head.shape[0])
    if version is None:
        raise RankerFileError(f"{path}: weight head has {head.shape[0]} outputs; a v1 ranker has 3, a v2 7, a v3 8, "
                              "a v4 9, a v5 10, a v6 12")
    declared = metadata.get("version")
    if declared and declared != version:
        raise RankerFileError(f"{path}: metadata says {declared} but the weight head's shape is {version}'s")
    feature_names = tuple(json.loads(metadata.get("feature_names", "[]")))
    if feature_names != FEATURE_NAMES:
        raise RankerFileError(f"{path}: trained on features {list(feature_names)}, this code computes "
                              f"{list(FEATURE_NAMES)}")
    signal_names = tuple(json.loads(metadata.get("signal_names", "[]")))
    if signal_names != SIGNALS_BY_VERSION[version]:
        raise RankerFileError(f"{path}: signal names {list(signal_names)} do not match a {version} head")
    embedding_dim = int(first.shape[1]) - len(feature_names)
    if str(embedding_dim) != metadata.get("embedding_dim"):
        raise RankerFileError(f"{path}: first layer reads {embedding_dim}-d embeddings, metadata says "
                              f"{metadata.get('embedding_dim')}")
    hidden = [int(tensors[f"trunk.{2 * i}.weight"].shape[0]) for i in range(len(tensors))
              if f"trunk.{2 * i}.weight" in tensors]
    model = CompositeRanker(embedding_dim, head.shape[0], len(feature_names), hidden)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as error:
        raise RankerFileError(f"{path}: tensors do not fit a {version} ranker ({error})") from error
    model.eval()
    return RankerFile(model=model, version=version, signal_names=signal_names, feature_names=feature_names,
                      embedding_model=metadata.get("embedding_model", ""), path=path,
                      extra=json.loads(metadata.get("extra", "{}")), load_seconds=time.perf_counter() - started)


@dataclass(frozen=True)
class SignalWeights:
    """What a ranker chose for one query: the twelve weights (in SIGNAL_NAMES order) and the scale."""

    weights: tuple[float, ...]
    scale: float
    model: str

    def as_dict(self) -> dict[str, float]:
        return dict(zip(SIGNAL_NAMES, self.weights, strict=True))


COSINE_ONLY = SignalWeights(weights=COSINE_WEIGHTS, scale=1.0, model="cosine")
NO_MODEL = SignalWeights(weights=FUSION, scale=1.0, model="cosine + BM25 (no usable model)")
NO_MODEL_WITH_TIME = SignalWeights(weights=FUSION_AND_TIME, scale=1.0,
                                   model="cosine + BM25 and time fit (no usable model)")
# The model recall uses when no model was published for it (trained by `make bench-longmemeval` on all four
# distributions; its evaluation names this file's sha256).
SHIPPED_RANKER = Path(__file__).resolve().parent / "models" / "shipped_ranker.safetensors"


def predict_weights(ranker: RankerFile, query_embedding: np.ndarray, features: np.ndarray) -> SignalWeights:
    """One forward pass (sub-millisecond on CPU) → the twelve SQL weights and the scale."""
    if query_embedding.shape[-1] != ranker.embedding_dim:
        raise ValueError(f"the ranker {ranker.name} reads {ranker.embedding_dim}-d query embeddings, "
                         f"got {query_embedding.shape[-1]}-d; retrain it for this embedder")
    with torch.inference_mode():
        weights, scale = ranker.model(torch.as_tensor(query_embedding, dtype=torch.float32).reshape(1, -1),
                                      torch.as_tensor(features, dtype=torch.float32).reshape(1, -1))
    return SignalWeights(weights=tuple(expand_weights(weights[0].tolist(), ranker.signal_names)),
                         scale=float(scale[0]), model=ranker.name)
