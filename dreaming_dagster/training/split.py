"""The train/validation split: by question, stratified by question type, seeded and stable."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

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
