"""The encoder study's pure parts (training/encoder.py): cosine judged as recall's vector side judges it, and the
query adapter learning a map MiniLM lacks."""

from __future__ import annotations

import numpy as np
import pytest

from dreaming_dagster.training import encoder


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def synthetic_set(memory: str, seed: int, questions: int = 60, pairs: int = 40, dimension: int = 16):
    """Each question's relevant pair lies along a fixed rotation of the question (what a memory-trained encoder
    would learn); its distractors lie near the question itself, so plain cosine ranks them first."""
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(np.random.default_rng(99).normal(size=(dimension, dimension)))[0].astype(np.float32)
    query_vectors = unit(rng.normal(size=(questions, dimension)))
    vectors, candidates, relevant = [], [], []
    for q in range(questions):
        near = unit(query_vectors[q] + 0.6 * rng.normal(size=(pairs - 1, dimension)))
        block = np.vstack([unit((query_vectors[q] @ rotation)[None]), near])
        start = sum(len(v) for v in vectors)
        vectors.append(block)
        members = np.arange(start, start + len(block))
        candidates.append(members)
        relevant.append(np.arange(len(block)) == 0)
    vectors = np.vstack(vectors)
    total = len(vectors)
    pair_set = encoder.MemoryPairs(
        user_ids=np.asarray(["u"] * total, object), content_hashes=[str(i) for i in range(total)],
        occurred_at=np.zeros(total, "datetime64[us]"), user_texts=[""] * total, reply_texts=[None] * total,
        vectors=vectors, reply_vectors=np.zeros_like(vectors), has_reply=np.zeros(total, bool))
    parts = ["train"] * (questions - 20) + ["dev"] * 10 + ["test"] * 10
    return encoder.RecallQuestions(memory=memory, question_ids=[f"{memory}{i}" for i in range(questions)],
                                   parts=parts, texts=[""] * questions, candidates=candidates, relevant=relevant,
                                   total_relevant=np.ones(questions, int), pairs=pair_set, query_vectors=query_vectors)


def test_cosine_scores_a_pair_by_its_better_turn():
    queries = unit(np.array([[1.0, 0.0], [0.0, 1.0]]))
    vectors = unit(np.array([[1.0, 0.2], [0.2, 1.0]]))
    replies = unit(np.array([[0.0, 1.0], [1.0, 0.0]]))
    scores = encoder.pair_scores(queries, vectors, replies, np.array([True, False]))
    # Pair 0's reply matches the second query exactly; pair 1 has no reply, so only its own turn counts.
    assert scores[1, 0] == pytest.approx(1.0) and scores[0, 1] == pytest.approx(vectors[1, 0])


def test_the_adapter_learns_what_cosine_misses_and_starts_as_minilm():
    sets = [synthetic_set("a", 1), synthetic_set("b", 2)]
    before = {s.memory: encoder.cosine_metrics(s, s.rows("test"), s.query_vectors)["ndcg@10"] for s in sets}
    untrained = encoder.QueryAdapter(16)
    assert np.allclose(untrained.apply(sets[0].query_vectors), sets[0].query_vectors, atol=1e-6)
    adapter, history = encoder.train_query_adapter(sets, seed=0, epochs=15, learning_rate=1e-2, log=lambda _: None)
    assert history[0]["epoch"] == 0 and history[0]["dev_gain"] == 0.0 and len(history) == 16
    after = {s.memory: encoder.cosine_metrics(s, s.rows("test"), adapter.apply(s.query_vectors))["ndcg@10"]
             for s in sets}
    # Held-out questions, never trained or chosen on, gain on both distributions.
    assert all(after[m] > before[m] + 0.2 for m in before), (before, after)


def test_training_examples_take_the_hardest_negatives_first():
    questions = synthetic_set("a", 3)
    examples = encoder.training_examples([questions], hard_negatives=5)
    assert len(examples) == len(questions.rows("train"))
    e = examples[0]
    scores = questions.query_vectors[e.question] @ questions.pairs.vectors[questions.candidates[e.question]].T
    labels = questions.relevant[e.question]
    hardest = questions.candidates[e.question][~labels][np.argsort(-scores[~labels])[:5]]
    assert e.positives.tolist() == questions.candidates[e.question][labels].tolist()
    assert e.negatives.tolist() == hardest.tolist()


def test_the_nearest_positive_is_the_relevant_pair_minilm_ranks_highest():
    questions = synthetic_set("a", 4)
    for row in questions.rows("train"):  # a session-wide label: a distractor near the question is relevant too
        questions.relevant[row] = questions.relevant[row].copy()
        questions.relevant[row][1] = True
    examples = encoder.training_examples([questions])
    for e in examples:
        scores = questions.query_vectors[e.question] @ questions.pairs.vectors[e.positives].T
        assert e.nearest_positive == e.positives[int(np.argmax(scores))] and len(e.positives) == 2
    # Mostly the distractor lying near the question, rarely the one along the rotation.
    near = sum(e.nearest_positive == questions.candidates[e.question][1] for e in examples)
    assert near >= 0.75 * len(examples)
    with pytest.raises(ValueError, match="positive"):
        encoder.fine_tune_encoder([questions], positive="farthest")


def test_negatives_outside_evidence_come_from_sessions_without_a_relevant_pair():
    questions = synthetic_set("a", 5)
    questions.pairs.session_ids = [f"s{i % 4}" for i in range(len(questions.pairs.content_hashes))]
    sessions = np.asarray(questions.pairs.session_ids)
    plain = encoder.training_examples([questions], hard_negatives=5)
    outside = encoder.training_examples([questions], hard_negatives=5, negatives_outside_evidence=True)
    assert len(outside) == len(plain) == len(questions.rows("train"))
    assert any(set(sessions[e.negatives]) & set(sessions[e.positives]) for e in plain)  # what the option removes
    for e in outside:
        assert len(e.negatives) == 5 and not set(sessions[e.negatives]) & set(sessions[e.positives])


@pytest.mark.slow  # merges a delta into MiniLM and exports it to ONNX
def test_a_trained_delta_embeds_through_the_shipped_path():
    from dreaming_dagster.embeddings import LocalMiniLMEmbedder
    from dreaming_dagster.encoder_delta import read_delta

    texts = ["user: my sister moved to Lyon", "assistant: that is a big change", "when did she move?"]
    rng = np.random.default_rng(0)
    layer = "encoder.layer.0.attention.self.query"
    zero = encoder.TunedEncoder(factors={layer: (np.zeros((8, 384), np.float32), np.zeros((384, 8), np.float32))},
                                scale=2.0, losses=[])
    with encoder.delta_encoder(zero) as unchanged:
        got = unchanged.embed(texts)
        assert unchanged.runtime_used == "onnx" and unchanged.spec.model != LocalMiniLMEmbedder.spec.model
        assert unchanged.spec.model.startswith(f"{LocalMiniLMEmbedder.spec.model}+lora-")
    assert np.allclose(got, LocalMiniLMEmbedder().embed(texts), atol=1e-5)  # a zero delta is MiniLM
    moved = encoder.TunedEncoder(factors={layer: (rng.normal(0, 0.3, (8, 384)).astype(np.float32),
                                                  rng.normal(0, 0.3, (384, 8)).astype(np.float32))}, scale=2.0, losses=[])
    with encoder.delta_encoder(moved) as tuned:
        changed = tuned.embed(texts)
        factors, scale = read_delta(tuned.encoder_delta)
    assert scale == 2.0 and set(factors) == {layer}
    assert not np.allclose(changed, got, atol=1e-3) and np.allclose(np.linalg.norm(changed, axis=1), 1, atol=1e-5)
