"""Merge rules (pure): the threshold decision, description appends, and the inverted-sort regression."""

import pytest

from dreaming_dagster.pipeline.merging import (
    Candidate,
    append_description,
    choose_merge_target,
    description_fragments,
)


def cands(*similarities):
    return [Candidate(f"id{i}", f"s{i}", sim) for i, sim in enumerate(similarities)]


def test_the_most_similar_candidate_at_or_above_the_threshold_wins():
    assert choose_merge_target(cands(0.91, 0.80, 0.76)).subject_id == "id0"
    assert choose_merge_target(cands(0.75)).subject_id == "id0"
    assert choose_merge_target(cands(0.7499)) is None
    assert choose_merge_target([]) is None


def test_candidates_in_the_wrong_order_are_refused():
    # The reference's acute nightmare: ordering by one measure and thresholding another. Candidates
    # that arrive least-similar first mean the query was inverted; refuse instead of merging blindly.
    with pytest.raises(ValueError, match="most similar first"):
        choose_merge_target(cands(0.2, 0.5, 0.9))


def test_bad_thresholds_are_refused():
    for threshold in (0, -0.1, 1.5):
        with pytest.raises(ValueError):
            choose_merge_target(cands(0.9), threshold)


def test_descriptions_append_once():
    assert append_description("", "first") == "first"
    assert append_description("first", "second") == "first | second"
    assert append_description("first | second", "SECOND ") == "first | second"
    assert append_description("first", "  ") == "first"
    assert description_fragments("a | b | A | c") == ["a", "b", "c"]
