"""What a question says about time: the window it asks about, its order words, its two sides.

"Which pair of shoes did I clean last month?" asked on 30 May 2023 asks about 1–30 April 2023; "How many
museums did I visit before March?" about everything up to 28 February; "between June 3 and June 10" about
those days; "in March and April" about both months. The window comes with the expression read, the
relation (in, before, after, since, until, between) and a certainty (the expression's: 1 for a named date,
lower for "recently"). "first / earliest / last / latest / most recently" are recorded as the question's
order; "…, the A or the B?" and "between the A and the B" (when A and B are not times) as its two sides.
A question with no time expression has no window, and recall ranks it exactly as without this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime

from dreaming_dagster.dates.finding import find_times
from dreaming_dagster.dates.grammar import reference_day
from dreaming_dagster.dates.ranges import FIRST_DAY, Mention, TimeRange

# How far past its edges a time still partly fits a window, by granularity (days): a "last week" pair two
# days out of a "this month" window fits a little, a "last year" pair a week out fits more.
MARGIN_DAYS = {"day": 1.0, "week": 3.0, "month": 7.0, "season": 15.0, "year": 30.0}
RELATIONS = ("in", "before", "after", "since", "until", "between")
ORDER_WORDS = {"first": "first", "earliest": "first", "earlier": "first", "last": "last", "latest": "last",
               "most recent": "last", "most recently": "last", "recent": "last", "later": "last"}
_ORDER = re.compile(r"\b(most\s+recently|most\s+recent|first|earliest|last|latest)\b", re.IGNORECASE)
_RELATION_BEFORE = re.compile(r"\b(before|prior\s+to|after|since|until|till|up\s+to|by)\s+(?:the\s+)?$",
                              re.IGNORECASE)
_BETWEEN = re.compile(r"\b(?:between|from)\s+(?P<a>.+)\s+(?:and|to|until|till|through)\s+(?P<b>.+?)[\s?.!]*$",
                      re.IGNORECASE)
_SIDES_OR = re.compile(r",\s*(?P<a>[^,]+?)\s+or\s+(?P<b>[^,]+?)[\s?.!]*$", re.IGNORECASE)
_NOT_A_WINDOW = re.compile(r"(?:\bmost(?:ly)?\s+recently|\bin\s+(?:\d+|[a-z]+)\s+(?:day|week|month|year)s?)$",
                           re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an|my)\s+", re.IGNORECASE)
MAX_QUESTION_CHARS = 2000  # time words past this are not read (a question, not a document)


@dataclass(frozen=True)
class TimeQuery:
    """What a question says about time. ``window`` is None when it names no time the grammar reads."""

    window: TimeRange | None = None
    relation: str | None = None  # one of RELATIONS, with a window
    expression: str | None = None  # the words read, as written
    order: str | None = None  # "first" or "last"
    sides: tuple[str, ...] = field(default_factory=tuple)  # the two things an "A or B" question compares

    @property
    def margin_days(self) -> float:
        return MARGIN_DAYS[self.window.granularity] if self.window else 0.0

    def as_dict(self) -> dict | None:
        """For results and clients (``label`` reads "1–31 May 2023"); None when nothing was understood."""
        if self.window is None and not self.order and not self.sides:
            return None
        window = self.window
        return {"first_day": window.first_day.isoformat() if window else None,
                "last_day": window.last_day.isoformat() if window else None,
                "granularity": window.granularity if window else None,
                "certainty": window.certainty if window else None,
                "label": (f"until {TimeRange(window.last_day, window.last_day, 'day').label()}"
                          if window and window.first_day == FIRST_DAY else window.label() if window else None),
                "relation": self.relation, "expression": self.expression, "order": self.order,
                "sides": list(self.sides)}


NO_TIME = TimeQuery()


def _hull(ranges: list[TimeRange]) -> TimeRange:
    coarsest = max(ranges, key=lambda r: list(MARGIN_DAYS).index(r.granularity))
    return TimeRange(min(r.first_day for r in ranges), max(r.last_day for r in ranges), coarsest.granularity,
                     min(r.certainty for r in ranges))


def _is_time(text: str, mentions: list[Mention], offset: int) -> bool:
    """Whether ``text`` (starting at ``offset`` in the question) is a time expression and little else."""
    inside = [m for m in mentions if offset <= m.start and m.end <= offset + len(text)]
    return bool(inside) and sum(len(m.text) for m in inside) >= 0.6 * len(_ARTICLE.sub("", text.strip()))


def _side(text: str) -> str:
    return _ARTICLE.sub("", text.strip().strip("'\"‘’“”")).strip()


def read_question(question: str, as_of: datetime | date) -> TimeQuery:
    """The time ``question`` asks about, resolved against ``as_of`` (when it is asked). Never raises on text."""
    text = question[:MAX_QUESTION_CHARS]
    reference = reference_day(as_of)
    # Not a window in a question: "most recently" (an order), "in two weeks" (a duration: "how much did I
    # gain in two weeks?").
    mentions = [m for m in find_times(text, reference)
                if not _NOT_A_WINDOW.search(text, 0, m.end) or _NOT_A_WINDOW.search(text, 0, m.end).end() != m.end]
    order = next((ORDER_WORDS[re.sub(r"\s+", " ", m.group(1).lower())] for m in _ORDER.finditer(text)
                  if not any(t.start <= m.start() < t.end for t in mentions)), None)

    sides: tuple[str, ...] = ()
    between = _BETWEEN.search(text)
    if between and len(mentions) >= 2 and _is_time(between["a"], mentions, between.start("a")) \
            and _is_time(between["b"], mentions, between.start("b")):
        first = [m for m in mentions if between.start("a") <= m.start < between.end("a")]
        last = [m for m in mentions if between.start("b") <= m.start < between.end("b")]
        # In order whichever side is written first: "between 1999 and 1990" is the 1990s to 1999.
        window = _hull([first[0].range, last[-1].range])
        return TimeQuery(window, "between", text[first[0].start:last[-1].end], order)
    if between and not between["a"].lower().startswith(("now", "today")):
        sides = (_side(between["a"]), _side(between["b"]))
    elif (alternatives := _SIDES_OR.search(text)) is not None:
        sides = (_side(alternatives["a"]), _side(alternatives["b"]))
    if any(side.lower() in ORDER_WORDS or not side for side in sides):  # "from earliest to latest"
        sides = ()
    if sides:
        # Times inside the two sides date the things compared ("the Ash Wednesday service"), not a window.
        side_span = (between or alternatives).start("a")
        mentions = [m for m in mentions if m.start < side_span]
    if not mentions:
        return TimeQuery(order=order, sides=sides)

    mention = mentions[0]
    relation_words = _RELATION_BEFORE.search(text, 0, mention.start)
    relation = relation_words.group(1).lower().split()[0] if relation_words else "in"
    relation = {"prior": "before", "till": "until", "up": "until", "by": "until"}.get(relation, relation)
    found = mention.range if len(mentions) == 1 or relation != "in" else _hull([m.range for m in mentions])
    expression = text[mention.start:mention.end] if relation == "in" and len(mentions) == 1 else \
        text[(relation_words.start() if relation_words else mention.start):mentions[-1].end]
    granularity, certainty = found.granularity, found.certainty
    if relation == "before":
        window = TimeRange(FIRST_DAY, date.fromordinal(max(found.first_day.toordinal() - 1, 1)), granularity, certainty)
    elif relation == "after":
        after = found.last_day.fromordinal(min(found.last_day.toordinal() + 1, date.max.toordinal()))
        window = TimeRange(after, max(after, reference), granularity, certainty)
    elif relation == "since":
        window = TimeRange(found.first_day, max(found.first_day, reference), granularity, certainty)
    elif relation == "until":
        window = TimeRange(FIRST_DAY, found.last_day, granularity, certainty)
    else:
        window = found
    return TimeQuery(window, relation, expression, order, sides)
