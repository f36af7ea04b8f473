"""The grounding rule (extraction/grounding.py): what a model may name of a text."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreaming_dagster.extraction.grounding import TextWords, grounded_names, is_grounded, stem

PAIR = TextWords.of("I went hiking near the Golden Gate last Saturday with my sister Rachel. Japanese food after.",
                    "Sounds lovely! Were the pies good?")


@pytest.mark.parametrize(("name", "grounded"), [
    ("Golden Gate Park", True),      # two of three words: a head noun the text leaves implicit
    ("Hiking", True), ("Hike", True),  # a light stem either way
    ("Pie", True), ("Japan", True),  # plural; a shared prefix of five letters
    ("Rachel", True), ("Sister Rachel", True), ("Saturday Hike", True),
    ("Douro River", False), ("Tagus Bridge", False),  # invented
    ("Douro Trip", False), ("Weekend Plans", False),  # a generic word alone grounds nothing
    ("Lisbon Trip Plan", False), ("", False),
])
def test_names(name, grounded):
    assert is_grounded(name, PAIR) is grounded


def test_verbatim_times_and_the_order_of_what_is_kept():
    assert PAIR.holds_verbatim("last  SATURDAY") and not PAIR.holds_verbatim("next Saturday")
    assert grounded_names(["Tagus Bridge", "Rachel", "Douro", "Golden Gate"], PAIR) == (
        ["Rachel", "Golden Gate"], ["Tagus Bridge", "Douro"])
    assert stem("running") == stem("run") and stem("stories") == stem("story") and stem("classes") == stem("class")


WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=30), st.data())
def test_a_name_made_of_the_texts_own_words_is_grounded(words, data):
    text = TextWords.of(" ".join(words))
    name = data.draw(st.lists(st.sampled_from(words), min_size=1, max_size=4))
    # Every word of the name occurs in the text, so it is grounded — unless all of it is stop or generic words.
    from dreaming_dagster.extraction.entities import generic_subjects
    from dreaming_dagster.extraction.grounding import stop_words

    meaningful = [w for w in name if w not in stop_words() and w not in generic_subjects()]
    assert is_grounded(" ".join(name).title(), text) or not meaningful
