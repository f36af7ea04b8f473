"""The local embedder's batching: texts grouped by length, vectors the same and in the caller's order."""

import threading

import numpy as np
import pytest

from dreaming_dagster.embeddings import LocalMiniLMEmbedder, _load_minilm, padding_bounded_batches


def test_batches_never_pad_a_text_to_more_than_twice_its_length_past_the_slack():
    lengths = [57, 256, 30, 256, 140, 129, 128, 64, 1, 0, 12, 3]
    batches = padding_bounded_batches(lengths, batch_size=64, slack=32)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each text once
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert all(longest <= max(2 * lengths[i], lengths[i] + 32) for i in batch), [lengths[i] for i in batch]
        assert lengths[batch[0]] == longest  # longest first, as the rule reads it
    # One pair's two turns (a short question, a long reply) are encoded apart; equal lengths stay together.
    assert padding_bounded_batches([57, 256], 64) == [[1], [0]]
    assert padding_bounded_batches([256, 256, 200, 129], 64) == [[0, 1, 2, 3]]
    # Short texts (subject names) share one call whatever their lengths: padding them costs less.
    assert padding_bounded_batches([3, 9, 14, 30], 64, slack=32) == [[3, 2, 1, 0]]
    assert padding_bounded_batches([3, 40], 64, slack=32) == [[1], [0]]


def test_batches_hold_at_most_max_tokens_padded_word_pieces():
    lengths = [256, 256, 250, 60, 62, 58, 61, 59, 63, 57, 60, 64, 5, 3, 4]
    batches = padding_bounded_batches(lengths, batch_size=64, max_tokens=512)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert all(len(batch) * lengths[batch[0]] <= 512 for batch in batches)
    assert batches[:2] == [[0, 1], [2]]  # two replies a call
    assert [len(b) for b in batches[2:]] == [8, 1, 3]  # eight questions, then the rest and the names
    assert padding_bounded_batches([300], 64, max_tokens=256) == [[0]]  # a text longer than the cap: alone
    assert padding_bounded_batches(lengths, 64) == padding_bounded_batches(lengths, 64, max_tokens=None)


def test_batches_hold_at_most_batch_size_texts():
    assert padding_bounded_batches([10] * 7, batch_size=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert padding_bounded_batches([], batch_size=3) == []
    with pytest.raises(ValueError, match="batch_size"):
        padding_bounded_batches([1], batch_size=0)


@pytest.fixture(scope="module")
def model_embedder() -> LocalMiniLMEmbedder:
    """The local model with nothing remembered between calls (the suite's local_embedder remembers vectors)."""
    return LocalMiniLMEmbedder(batch_size=32)


@pytest.mark.slow  # starts processes or loads the model
def test_local_embedder_returns_the_vectors_of_one_text_at_a_time_in_order(model_embedder):
    texts = ["user: where does my sister live?",
             "assistant: " + "Lisbon has steep hills, trams and tiled facades. " * 40,  # truncated at 256 pieces
             "user: I adopted a beagle named Max",
             "assistant: Congratulations on Max! Beagles are friendly, curious dogs that love long walks.",
             "x"]
    model = _load_minilm()
    one_by_one = np.vstack([model.encode([t], normalize_embeddings=True) for t in texts])
    for _ in range(2):  # called repeatedly: same answer
        vectors = model_embedder.embed(texts)
        assert vectors.shape == (5, 384) and vectors.dtype == np.float32
        assert np.allclose(vectors, one_by_one, atol=1e-5)
    assert np.allclose(model_embedder.embed(texts[::-1]), one_by_one[::-1], atol=1e-5)


def test_local_embedder_is_safe_to_call_from_threads(model_embedder):
    texts = [f"user: what did I say about topic {i} last week?" for i in range(6)] + ["assistant: " + "ok " * 300]
    expected = model_embedder.embed(texts)
    results, errors = {}, []

    def work(worker: int) -> None:
        try:
            results[worker] = model_embedder.embed(texts[worker:] + texts[:worker])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for worker, vectors in results.items():
        assert np.allclose(vectors, np.roll(expected, -worker, axis=0), atol=1e-5)
