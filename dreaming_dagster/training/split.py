"""The train/validation split: by question, stratified by question type, seeded and stable."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def stratified_split(question_ids: Sequence[str], question_types: Sequence[str], *, validation_share: float,
                     seed: int) -> tuple[list[str], list[str]]:
    """(train ids, validation ids). Each type contributes round(share × its count) validation questions.

    Stable: the result depends only on the seed and each type's own question ids (sorted first, each type
    shuffled by its own generator), so input order never matters and adding questions of one type leaves
    the other types' assignment unchanged.
    """
    if not 0.0 < validation_share < 1.0:
        raise ValueError(f"validation_share must be between 0 and 1, got {validation_share}")
    if len(question_ids) != len(question_types) or len(set(question_ids)) != len(question_ids):
        raise ValueError("question_ids must be unique and match question_types one to one")
    by_type: dict[str, list[str]] = {}
    for question_id, question_type in zip(question_ids, question_types, strict=True):
        by_type.setdefault(question_type, []).append(question_id)
    train, validation = [], []
    for question_type in sorted(by_type):
        members = sorted(by_type[question_type])
        type_seed = int.from_bytes(hashlib.sha256(f"{seed}:{question_type}".encode()).digest()[:8], "little")
        order = np.random.default_rng(type_seed).permutation(len(members))
        n_validation = int(round(validation_share * len(members)))
        validation += [members[i] for i in order[:n_validation]]
        train += [members[i] for i in order[n_validation:]]
    return sorted(train), sorted(validation)


# The ranker's split of LongMemEval's answerable questions, by question id: validation (the oracle's reported
# part, never selected on), dev (models, epochs and settings are chosen on it), test (the `_S` haystacks'
# reported part, never selected on) and train. Every memory uses the same ids, so no question trains in one
# memory and is judged in another.
VALIDATION_SHARE = 0.2
DEV_SHARE = 0.2
TEST_SHARE = 0.25
SPLIT_SEED = 0
PARTS = ("train", "dev", "validation", "test")


@dataclass(frozen=True)
class RankerSplit:
    train: tuple[str, ...]
    dev: tuple[str, ...]
    validation: tuple[str, ...]
    test: tuple[str, ...] = ()

    def part_of(self, question_id: str) -> str | None:
        for name in PARTS:
            if question_id in getattr(self, name):
                return name
        return None

    def with_questions(self, parts: dict[str, Sequence[str]]) -> RankerSplit:
        """This split plus other questions (another distribution's), by part."""
        return RankerSplit(**{name: tuple(sorted({*getattr(self, name), *parts.get(name, ())})) for name in PARTS})


def ranker_split(question_ids: Sequence[str], question_types: Sequence[str]) -> RankerSplit:
    """Validation is 20% of each type (seed 0, the split every published figure reports on); dev is 20% of
    each type of the rest and test a quarter of each type of what remains."""
    type_of = dict(zip(question_ids, question_types, strict=True))
    rest, validation = stratified_split(question_ids, question_types, validation_share=VALIDATION_SHARE,
                                        seed=SPLIT_SEED)
    rest, dev = stratified_split(rest, [type_of[q] for q in rest], validation_share=DEV_SHARE, seed=SPLIT_SEED)
    train, test = stratified_split(rest, [type_of[q] for q in rest], validation_share=TEST_SHARE, seed=SPLIT_SEED)
    return RankerSplit(tuple(train), tuple(dev), tuple(validation), tuple(test))


def stratified_sample(question_ids: Sequence[str], question_types: Sequence[str], count: int, *,
                      seed: int = SPLIT_SEED) -> list[str]:
    """``count`` of the questions, each type in proportion (the same seeded order as the split)."""
    if count >= len(question_ids):
        return sorted(question_ids)
    if count <= 0:
        return []
    return stratified_split(question_ids, question_types, validation_share=count / len(question_ids), seed=seed)[1]


def haystack_question_ids(split: RankerSplit, types: dict[str, str], training_questions: int,
                          held_out_questions: int | None = None) -> frozenset[str]:
    """The questions whose `_S` haystack becomes a user: the dev and test questions (all, or a stratified sample
    of ``held_out_questions`` of each) and a stratified sample of ``training_questions`` training ones (a larger
    count keeps the smaller's)."""
    def sample(ids: tuple[str, ...], count: int | None) -> frozenset[str]:
        ordered = sorted(ids)
        return frozenset(ordered if count is None else stratified_sample(ordered, [types[q] for q in ordered], count))

    return sample(split.dev, held_out_questions) | sample(split.test, held_out_questions) | sample(
        split.train, training_questions)
