"""Time expressions in English text, found and resolved against a reference time into day ranges.

A small grammar, deterministic and offline: "yesterday", "last Saturday", "on the 3rd of June", "two weeks
ago", "in May", "this weekend", "the summer of 2021", "early last month", "Christmas Eve", "in the last
three months", "two days before Easter". Each resolves against a reference (the time a pair was said, or
the time a question is asked) into a :class:`TimeRange`: a first and a last day (inclusive) and
the granularity the expression speaks in (day, week, month, season, year). An expression that names an
event the grammar does not know ("the day before my birthday") resolves to None, never an error.

Conventions where English is ambiguous (docs/dreaming.md, "How time is read"):
- weeks run Monday to Sunday; seasons are the northern meteorological ones (winter is December–February);
- "last Saturday" is the latest Saturday before the reference day; "this Saturday" the one of the
  reference's week; "next Saturday" the first after the reference day; a bare "Saturday" the nearest one
  (ties to the past);
- a month or a day named without a year ("in May", "June 3") is its nearest occurrence to the reference
  (ties to the past): said in February, "in May" is the coming May; said in July, the May just gone; found in
  a clause that speaks only of the past ("did", "was", "went", "-ed") a bare month, date, weekday, holiday or
  season is the last one on or before the reference day, in one that speaks only of the future ("will",
  "going to", "thinking of") the next one on or after it (:func:`find_times`);
- a reference time is read on its own calendar (its offset's day; a naive time is UTC);
- "N weeks ago" is the Monday–Sunday week holding the day N×7 days back; "N months ago" the calendar month;
- "in the last N days/weeks/months" is a rolling range ending on the reference day; "a couple" is 2,
  "a few" and "several" 3; "recently", "lately" and "the other day" are vague (the last 30 or 7 days);
- early / mid / late split a month into days 1–10, 11–20, 21–end, and a year into January–April,
  May–August, September–December.
Every range is clamped to the years 1–9999.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from dateutil.easter import easter

GRANULARITIES = ("day", "week", "month", "season", "year")
FIRST_DAY, LAST_DAY = date(1, 1, 1), date(9999, 12, 31)


@dataclass(frozen=True)
class TimeRange:
    """Days ``first_day`` to ``last_day`` (inclusive), read at ``granularity``; ``certainty`` in (0, 1] is how
    sure the reading is (1 for a named date, lower for "recently" or a bare weekday)."""

    first_day: date
    last_day: date
    granularity: str
    certainty: float = 1.0

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        if self.last_day < self.first_day:
            raise ValueError(f"a range cannot end ({self.last_day}) before it starts ({self.first_day})")

    @property
    def days(self) -> int:
        return (self.last_day - self.first_day).days + 1

    def label(self) -> str:
        """How a client shows it: "3 June 2023", "1–31 May 2023", "29 May – 4 June 2023"."""
        first, last = self.first_day, self.last_day
        if first == last:
            return f"{first.day} {first:%B} {first.year}"
        if (first.year, first.month) == (last.year, last.month):
            return f"{first.day}–{last.day} {first:%B} {first.year}"
        if first.year == last.year:
            return f"{first.day} {first:%B} – {last.day} {last:%B} {last.year}"
        return f"{first.day} {first:%B} {first.year} – {last.day} {last:%B} {last.year}"


@dataclass(frozen=True)
class Mention:
    """A time expression found in a text: where, its words, and what it resolved to."""

    start: int
    end: int
    text: str
    range: TimeRange


# ---------------------------------------------------------------------------------------- calendar arithmetic
def _clamp(day_number: int) -> date:
    return date.fromordinal(min(max(day_number, FIRST_DAY.toordinal()), LAST_DAY.toordinal()))


def _shift(day: date, days: int) -> date:
    return _clamp(day.toordinal() + days)


def _span(first: date | int, last: date | int, granularity: str, certainty: float = 1.0) -> TimeRange:
    first = first if isinstance(first, date) else _clamp(first)
    last = last if isinstance(last, date) else _clamp(last)
    return TimeRange(first, max(first, last), granularity, certainty)


def _month_index(year: int, month: int) -> int:
    return year * 12 + month - 1


def _month(index: int) -> TimeRange:
    index = min(max(index, _month_index(1, 1)), _month_index(9999, 12))
    year, month = divmod(index, 12)
    return _span(date(year, month + 1, 1), date(year, month + 1, calendar.monthrange(year, month + 1)[1]), "month")


def _year(year: int) -> TimeRange:
    """The calendar year (clamped to 1–9999)."""
    year = min(max(year, 1), 9999)
    return _span(date(year, 1, 1), date(year, 12, 31), "year")


def _week_of(day: date) -> TimeRange:
    monday = day.toordinal() - day.weekday()
    return _span(monday, monday + 6, "week")


# Words after a season that make it a kind of thing, not a time ("fall foliage", "summer drinks", "fall asleep").
_SEASON_NOUNS = r"(?:asleep|apart|behind|down|off|over|foliage|colou?rs?|leaves|collection|clothes|wardrobe|coats?|" \
    r"jackets?|fashion|menu|drinks?|recipes?|vegetables|produce|squash|flowers|allergies|fling|sale)\b"
SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


def _season(name: str, year: int) -> TimeRange:
    """The season starting in ``year`` (winter: December of ``year`` to February of the next)."""
    start = _month_index(year, SEASON_START[name])
    return _span(_month(start).first_day, _month(start + 2).last_day, "season")


def _season_holding(name: str, day: date) -> TimeRange:
    """The latest ``name`` season starting on or before ``day``."""
    year = day.year if day.month >= SEASON_START[name] else day.year - 1
    return _season(name, year)


def _nearest(candidates: list[TimeRange], reference: date) -> TimeRange:
    """The candidate nearest the reference day (one holding it first; ties to the past)."""
    def distance(r: TimeRange) -> tuple[int, int]:
        if r.first_day <= reference <= r.last_day:
            return 0, 0
        if r.last_day < reference:
            return (reference - r.last_day).days, 0
        return (r.first_day - reference).days, 1
    return min(candidates, key=distance)


# --------------------------------------------------------------------------------------------- vocabulary
WEEKDAYS = {name: index for index, name in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}
MONTHS = {name: index + 1 for index, name in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"))}
MONTHS.update({"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
               "oct": 10, "nov": 11, "dec": 12})
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a couple": 2,
           "couple of": 2, "a few": 3, "few": 3, "several": 3, "a dozen": 12, "fifteen": 15, "twenty": 20,
           "thirty": 30}
ORDINAL_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "last": -1}
UNIT_DAYS = {"day": 1, "week": 7, "fortnight": 14}
UNIT_GRANULARITY = {"day": "day", "week": "week", "fortnight": "week", "month": "month", "year": "year",
                    "decade": "year"}


def _number(text: str) -> int:
    text = text.strip().lower()
    return int(text) if text.isdigit() else NUMBERS[text]


def _alternation(words) -> str:
    return "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))


_WEEKDAY = rf"(?P<weekday>{_alternation(WEEKDAYS)})"
_FULL_MONTHS = [name for name in MONTHS if len(name) > 4 or name in ("may", "june", "july")]
_MONTH = rf"(?P<month>{_alternation(MONTHS)})\.?"
_NUM = rf"(?P<count>\d{{1,6}}|{_alternation(NUMBERS)})"
_UNIT = r"(?P<unit>day|week|fortnight|month|year|decade)s?"
_DAY = r"(?P<day>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>[12]\d{3})"
_PERIOD = r"(?P<period>week|month|year|weekend)"
_SEASON = r"(?P<season>spring|summer|fall|autumn|winter)"
_RELATIVE = r"(?P<relative>last|this|next|past|previous|coming)"
_PART = r"(?P<part>early|earlier|mid|middle|late|later|beginning|start|end)"

_HOLIDAY_NOUNS = r"horror|theme|themed|decorations?|costumes?|movies?|candy|specials?|sales?|cards?|tree|lights|" \
    r"songs?|music|spirit|vibes?|services?|mass|markets?|sweaters?|cookies|dinners|traditions?"
HOLIDAYS: dict[str, Callable[[int], date]] = {
    "christmas eve": lambda y: date(y, 12, 24),
    "christmas day": lambda y: date(y, 12, 25),
    "christmas": lambda y: date(y, 12, 25),
    "boxing day": lambda y: date(y, 12, 26),
    "new year's eve": lambda y: date(y, 12, 31),
    "new years eve": lambda y: date(y, 12, 31),
    "new year's day": lambda y: date(y, 1, 1),
    "new years day": lambda y: date(y, 1, 1),
    "halloween": lambda y: date(y, 10, 31),
    "valentine's day": lambda y: date(y, 2, 14),
    "valentines day": lambda y: date(y, 2, 14),
    "st. patrick's day": lambda y: date(y, 3, 17),
    "st patrick's day": lambda y: date(y, 3, 17),
    "saint patrick's day": lambda y: date(y, 3, 17),
    "independence day": lambda y: date(y, 7, 4),
    "the fourth of july": lambda y: date(y, 7, 4),
    "fourth of july": lambda y: date(y, 7, 4),
    "easter sunday": lambda y: easter(y),
    "easter": lambda y: easter(y),
    "good friday": lambda y: easter(y) - timedelta(days=2),
    "maundy thursday": lambda y: easter(y) - timedelta(days=3),
    "palm sunday": lambda y: easter(y) - timedelta(days=7),
    "ash wednesday": lambda y: easter(y) - timedelta(days=46),
    "easter monday": lambda y: easter(y) + timedelta(days=1),
    "thanksgiving": lambda y: _nth_weekday(y, 11, 3, 4),
    "thanksgiving day": lambda y: _nth_weekday(y, 11, 3, 4),
    "mother's day": lambda y: _nth_weekday(y, 5, 6, 2),
    "mothers day": lambda y: _nth_weekday(y, 5, 6, 2),
    "father's day": lambda y: _nth_weekday(y, 6, 6, 3),
    "fathers day": lambda y: _nth_weekday(y, 6, 6, 3),
    "memorial day": lambda y: _nth_weekday(y, 5, 0, -1),
    "labor day": lambda y: _nth_weekday(y, 9, 0, 1),
    "labour day": lambda y: _nth_weekday(y, 9, 0, 1),
}
_HOLIDAY = rf"(?P<holiday>{_alternation(HOLIDAYS)})(?!-|\s+(?:{_HOLIDAY_NOUNS})\b)"


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The ``n``-th ``weekday`` (0 Monday) of the month; n = -1: the last."""
    days = [d for d in range(1, calendar.monthrange(year, month)[1] + 1) if date(year, month, d).weekday() == weekday]
    return date(year, month, days[n if n < 0 else n - 1])


# ------------------------------------------------------------------------------------------- the rules
Rule = Callable[[re.Match, date], TimeRange | None]
RULES: list[tuple[re.Pattern, Rule]] = []
# The words a rule cannot match without (a category of TRIGGERS below): find_times runs a rule over a text
# only when one of them is in it.
RULE_NEEDS: dict[Rule, frozenset[str]] = {}


def rule(pattern: str, *needs: str) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        RULES.append((re.compile(rf"(?:{pattern})", re.IGNORECASE), function))
        RULE_NEEDS[function] = RULE_NEEDS.get(function, frozenset()) | frozenset(needs)
        return function
    return register


def _part_of(whole: TimeRange, part: str) -> TimeRange:
    """early / mid / late (beginning / middle / end) of a year (its thirds), a season (its months), a month
    (days 1–10, 11–20, 21–end) or a week (its first, middle, last days)."""
    part = {"earlier": "early", "beginning": "early", "start": "early", "middle": "mid", "later": "late",
            "end": "late"}.get(part.lower(), part.lower())
    if whole.granularity == "year":
        year = whole.first_day.year
        months = {"early": (1, 4), "mid": (5, 8), "late": (9, 12)}[part]
        return _span(date(year, months[0], 1), _month(_month_index(year, months[1])).last_day, "month")
    if whole.granularity == "season":  # its first, middle or last month
        start = _month_index(whole.first_day.year, whole.first_day.month) + {"early": 0, "mid": 1, "late": 2}[part]
        return _month(start)
    if whole.granularity == "month":
        first, last = whole.first_day, whole.last_day
        days = {"early": (1, 10), "mid": (11, 20), "late": (21, last.day)}[part]
        return _span(first.replace(day=days[0]), first.replace(day=days[1]), "day")
    thirds = {"early": (0, 2), "mid": (2, 4), "late": (4, whole.days - 1)}[part]
    return _span(_shift(whole.first_day, thirds[0]), _shift(whole.first_day, min(thirds[1], whole.days - 1)), "day")


def _period(name: str, relative: str, ref: date) -> TimeRange:
    """this / last / next week, weekend, month or year."""
    step = {"last": -1, "previous": -1, "past": -1, "this": 0, "coming": 1, "next": 1}[relative.lower()]
    name = name.lower()
    if name == "week":
        return _week_of(_shift(ref, 7 * step))
    if name == "weekend":
        saturday = _shift(_week_of(ref).first_day, 5 + 7 * step)
        return _span(saturday, _shift(saturday, 1), "day")
    if name == "month":
        return _month(_month_index(ref.year, ref.month) + step)
    return _year(ref.year + step)


@rule(r"by\s+the\s+end\s+of\s+(?:the\s+day|today)", "named_day", "unit")
def _end_of_today(m, ref):
    return _span(ref, ref, "day")


@rule(r"(?:the\s+)?day\s+before\s+yesterday", "named_day")
def _day_before_yesterday(m, ref):
    return _span(_shift(ref, -2), _shift(ref, -2), "day")


@rule(r"(?:the\s+)?day\s+after\s+tomorrow", "named_day")
def _day_after_tomorrow(m, ref):
    return _span(_shift(ref, 2), _shift(ref, 2), "day")


@rule(r"(?P<word>today|tonight|yesterday|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening))"
      r"(?:\s+(?:morning|afternoon|evening|night))?", "named_day")
def _named_day(m, ref):
    word = m["word"].lower()
    offset = -1 if word.startswith(("yesterday", "last")) else 1 if word == "tomorrow" else 0
    return _span(_shift(ref, offset), _shift(ref, offset), "day")


VAGUE_COUNTS = ("a couple of", "a couple", "couple of", "a few", "few", "several")


def _vague_count(text: str) -> bool:
    return re.sub(r"\s+", " ", text.strip().lower()) in VAGUE_COUNTS


def _units_back(ref: date, unit: str, count: int) -> TimeRange:
    """The day, week, month or year ``count`` units after ``ref`` (negative: before)."""
    if unit in UNIT_DAYS:
        day = _shift(ref, count * UNIT_DAYS[unit])
        return _span(day, day, "day") if unit == "day" else _week_of(day)
    if unit == "month":
        return _month(_month_index(ref.year, ref.month) + count)
    return _year(ref.year + count * (10 if unit == "decade" else 1))


@rule(r"(?:the\s+)?week\s+before\s+last", "unit")
def _week_before_last(m, ref):
    return _week_of(_shift(ref, -14))


@rule(rf"{_NUM}\s+{_UNIT}\s+(?P<direction>ago|back|earlier|from\s+now|later)", "unit")
# "in two weeks" (not "in a day", which is mostly a duration: "twice in a day").
@rule(rf"(?P<direction>in)\s+(?!an?\s+(?:day|week|fortnight|month|year|decade)){_NUM}\s+{_UNIT}(?:'?s)?(?:\s+time)?", "unit")
def _units_away(m, ref):
    count, unit = _number(m["count"]), m["unit"].lower()
    sign = 1 if m["direction"].lower() in ("in", "from now", "later") else -1
    if _vague_count(m["count"]):
        # "a few weeks ago": one unit either side of the count, at the unit's granularity
        near, far = _units_back(ref, unit, sign * (count - 1)), _units_back(ref, unit, sign * (count + 1))
        first, last = (far, near) if sign < 0 else (near, far)
        return _span(first.first_day, last.last_day, UNIT_GRANULARITY[unit], 0.7)
    return _units_back(ref, unit, sign * count)


@rule(rf"(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?(?:last|past|previous)\s+(?:{_NUM}\s+)?{_UNIT}", "unit")
def _rolling(m, ref):
    # "the last month" (no count) is the 30 days to now; "last month" (no article) is the calendar month.
    count = _number(m["count"]) if m["count"] else 1
    unit = m["unit"].lower()
    if not m["count"] and not re.match(r"(?:(?:in|over|during|within|for)\s+)?the\s", m[0], re.IGNORECASE):
        if unit in ("week", "month", "year"):
            return _period(unit, "last", ref)
        return None
    if unit in UNIT_DAYS:
        first = _shift(ref, -count * UNIT_DAYS[unit])
    elif unit == "month":
        back = _month(_month_index(ref.year, ref.month) - count)
        first = back.first_day.replace(day=min(ref.day, back.last_day.day))
    else:
        years = count * (10 if unit == "decade" else 1)
        first = _clamp(date(max(ref.year - years, 1), ref.month, min(ref.day, 28)).toordinal())
    return _span(first, ref, UNIT_GRANULARITY[unit], 0.8 if m["count"] and _vague_count(m["count"]) else 1.0)


@rule(rf"(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?(?:next|coming|following)\s+{_NUM}\s+{_UNIT}", "unit")
def _rolling_ahead(m, ref):
    """"the next three days", "over the next few weeks": from the reference day to as far ahead."""
    count, unit = _number(m["count"]), m["unit"].lower()
    if unit in UNIT_DAYS:
        last = _shift(ref, count * UNIT_DAYS[unit])
    elif unit == "month":
        ahead = _month(_month_index(ref.year, ref.month) + count)
        last = ahead.first_day.replace(day=min(ref.day, ahead.last_day.day))
    else:
        last = _clamp(date(min(ref.year + count * (10 if unit == "decade" else 1), 9999), ref.month,
                           min(ref.day, 28)).toordinal())
    return _span(ref, last, UNIT_GRANULARITY[unit], 0.8 if _vague_count(m["count"]) else 1.0)


@rule(rf"{_NUM}\s+weekends?\s+ago", "unit")
def _weekends_ago(m, ref):
    saturday = _shift(_week_of(ref).first_day, 5 - 7 * _number(m["count"]))
    return _span(saturday, _shift(saturday, 1), "day", 0.7 if _vague_count(m["count"]) else 1.0)


@rule(rf"(?:the\s+)?{_PART}\s+of\s+(?:the\s+)?{_SEASON}(?:,?\s+(?:of\s+)?{_YEAR})?", "season")
def _part_of_season(m, ref):
    whole = _season(m["season"].lower(), int(m["year"])) if m["year"] else _season_near(m["season"], None, ref)
    return _part_of(whole, m["part"])


@rule(rf"(?:the\s+)?{_PART}\s+(?:of\s+)?(?:the\s+)?{_RELATIVE}?\s*{_PERIOD}", "unit")
def _part_of_period(m, ref):
    if m["part"].lower() in ("earlier", "later"):
        whole = _period(m["period"], m["relative"] or "this", ref)
        if m["part"].lower() == "earlier":
            return _span(whole.first_day, ref, whole.granularity if whole.granularity != "year" else "month")
        return _span(ref, whole.last_day, whole.granularity if whole.granularity != "year" else "month")
    return _part_of(_period(m["period"], m["relative"] or "this", ref), m["part"])


@rule(rf"(?:the\s+)?(?P<nth>first|second|third|fourth|last)\s+(?P<period>week|weekend)\s+(?:of|in)\s+{_MONTH}"
      rf"(?:,?\s+{_YEAR})?", "month")
def _week_of_month(m, ref):
    month = _month_of(m, ref)
    first, last = month.first_day, month.last_day
    nth = ORDINAL_WORDS[m["nth"].lower()]
    if m["period"].lower() == "weekend":
        saturdays = [d for d in range(first.day, last.day + 1) if first.replace(day=d).weekday() == 5]
        saturday = first.replace(day=saturdays[nth if nth < 0 else nth - 1])
        return _span(saturday, min(_shift(saturday, 1), LAST_DAY), "day")
    if nth < 0:
        return _span(last.replace(day=last.day - 6), last, "week")
    return _span(first.replace(day=7 * nth - 6), first.replace(day=min(7 * nth, last.day)), "week")


@rule(r"(?:this|last|next|coming|previous|the)\s+(?:long\s+)?weekend", "unit")
def _weekend(m, ref):
    words = m[0].lower().split()
    if words[0] in ("this", "last", "next", "coming", "previous"):
        return _period("weekend", words[0], ref)
    # A bare "the weekend": the one under way, the one just gone (Monday to Wednesday) or the coming one.
    return _period("weekend", "this" if ref.weekday() >= 3 else "last", ref)


@rule(rf"{_RELATIVE}\s+{_PERIOD}", "unit")
def _relative_period(m, ref):
    return _period(m["period"], m["relative"], ref)


# Not "Sundays", "Saturday mornings" or "Sunday brunches" (habits), nor "Sunday best" or "Monday blues" (no
# day at all); but "Monday was rough" and "Friday is my day off" are days: a word ending in "s" after the
# weekday is a plural noun unless it is one of the verbs a weekday is the subject of.
_WEEKDAY_VERBS = r"is|was|has|does|goes|seems|sounds|looks|works|suits|means|feels|starts|begins|ends"
@rule(rf"(?:(?P<relative>last|this|next|coming|previous|on|the)\s+)?{_WEEKDAY}"
      rf"(?!s\b|\s+(?!(?:{_WEEKDAY_VERBS})\b)[a-z]+s\b|\s+(?:best|school|blues|roast|league|night\s+live)\b)"
      r"(?:\s+(?:morning|afternoon|evening|night))?", "weekday")
def _weekday(m, ref):
    target = WEEKDAYS[m["weekday"].lower()]
    relative = (m["relative"] or "").lower()
    back = (ref.weekday() - target) % 7 or 7  # days back to the latest such day before today
    if relative in ("last", "previous"):
        day = _shift(ref, -back)
    elif relative == "this":
        day = _shift(_week_of(ref).first_day, target)
    elif relative in ("next", "coming"):
        day = _shift(ref, 7 - back if back != 7 else 7)
    else:
        if ref.weekday() == target:
            return _span(ref, ref, "day", 0.8)
        ahead = 7 - back
        day = _shift(ref, -back) if back <= ahead else _shift(ref, ahead)
        return _span(day, day, "day", 0.8)
    return _span(day, day, "day")


def _month_of(m, ref: date, relative: str | None = None) -> TimeRange:
    month = MONTHS[m["month"].lower()]
    if m["year"]:
        return _month(_month_index(int(m["year"]), month))
    relative = (relative or "").lower()
    this_year = _month_index(ref.year, month)
    now = _month_index(ref.year, ref.month)
    if relative in ("last", "previous", "past"):
        return _month(this_year if this_year < now else this_year - 12)
    if relative == "this":
        return _month(this_year)
    if relative in ("next", "coming"):
        return _month(this_year if this_year > now else this_year + 12)
    return _nearest([_month(this_year - 12), _month(this_year), _month(this_year + 12)], ref)


def _day_in_month(m, ref: date) -> TimeRange | None:
    month, day = MONTHS[m["month"].lower()], int(m["day"])
    years = [int(m["year"])] if m["year"] else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and day <= calendar.monthrange(y, month)[1]]
    if not days:
        return None
    return _nearest([_span(d, d, "day") for d in days], ref)


# Days of one month: "March 15-16", "February 10th and 11th", "June 3 to 5, 2022".
@rule(rf"{_MONTH}\s+(?:the\s+)?{_DAY}\s*(?P<joint>-|–|to|through|till|until|and)\s*(?:the\s+)?"
      rf"(?P<last>[12]\d|3[01]|0?[1-9])(?P<suffix>st|nd|rd|th)?(?:,?\s+{_YEAR})?(?![\d:])", "month")
def _days_in_month(m, ref):
    if m["joint"].lower() == "and" and not m["suffix"]:  # "on May 3 and 4 people came": a count, not a day
        return None
    first, last = int(m["day"]), int(m["last"])
    start = _day_in_month(m, ref)
    if start is None or not first < last <= calendar.monthrange(start.first_day.year, start.first_day.month)[1]:
        return None
    return _span(start.first_day, start.first_day.replace(day=last), "day")


@rule(rf"(?:the\s+)?{_DAY}\s*(?P<joint>-|–|to|through|till|until|and)\s*(?:the\s+)?(?P<last>[12]\d|3[01]|0?[1-9])"
      rf"(?P<suffix>st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?", "month")
def _days_before_month(m, ref):
    return _days_in_month(m, ref)


@rule(rf"{_MONTH}\s+(?:the\s+)?{_DAY}(?:,?\s+{_YEAR})?(?![\d:])", "month")
@rule(rf"(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?", "month")
def _date_in_words(m, ref):
    return _day_in_month(m, ref)


# A weekday and its date, one day: "Monday, May 6th", "Saturday the 4th of May". Without a year, the year
# whose date falls on that weekday, the nearest such (else the nearest date).
@rule(rf"{_WEEKDAY},?\s+(?:the\s+)?{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?(?![\d:])", "weekday")
@rule(rf"{_WEEKDAY},?\s+(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?", "weekday")
def _weekday_and_date(m, ref):
    month, day, weekday = MONTHS[m["month"].lower()], int(m["day"]), WEEKDAYS[m["weekday"].lower()]
    years = [int(m["year"])] if m["year"] else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and day <= calendar.monthrange(y, month)[1]]
    on_the_weekday = [d for d in days if d.weekday() == weekday]
    chosen = on_the_weekday or days
    return _nearest([_span(d, d, "day") for d in chosen], ref) if chosen else None


# A month or a date qualified by a year said in words: "August last year", "March of this year", "last year in
# August", "May 6th next year".
_YEAR_WORDS = r"(?P<relative>last|this|next|previous)\s+year"


@rule(rf"{_MONTH}(?:\s+(?:the\s+)?{_DAY})?,?\s+(?:of\s+)?{_YEAR_WORDS}", "month")
@rule(rf"{_YEAR_WORDS},?\s+in\s+{_MONTH}(?:\s+(?:the\s+)?{_DAY})?", "month")
def _month_of_a_year_in_words(m, ref):
    year = ref.year + {"last": -1, "previous": -1, "this": 0, "next": 1}[m["relative"].lower()]
    month = MONTHS[m["month"].lower()]
    if m["day"]:
        day = int(m["day"])
        return _span(date(year, month, day), date(year, month, day), "day") \
            if day <= calendar.monthrange(year, month)[1] else None
    return _month(_month_index(year, month))


@rule(r"(?P<year>[12]\d{3})-(?P<month_number>[01]?\d)-(?P<day>[0-3]?\d)", "numeric")
@rule(r"(?P<month_number>[01]?\d)/(?P<day>[0-3]?\d)(?:/(?P<year>\d{4}|\d{2}))?(?![\d/])", "numeric")
def _numeric_date(m, ref):
    month, day = int(m["month_number"]), int(m["day"])
    if not 1 <= month <= 12:
        return None
    year = m["year"]
    if year and len(year) == 2:
        year = str(2000 + int(year))
    years = [int(year)] if year else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and 1 <= day <= calendar.monthrange(y, month)[1]]
    return _nearest([_span(d, d, "day") for d in days], ref) if days else None


@rule(rf"(?:(?P<part>early|mid|late|the\s+beginning\s+of|the\s+start\s+of|the\s+middle\s+of|the\s+end\s+of)[\s-]+)?"
      rf"(?:(?P<relative>last|this|next|previous|coming)\s+)?{_MONTH}(?:,?\s+(?:of\s+)?{_YEAR})?", "month")
def _month_name(m, ref):
    whole = _month_of(m, ref, m["relative"])
    # "the beginning of" → "beginning"
    return _part_of(whole, m["part"].split()[-2] if " " in m["part"] else m["part"]) if m["part"] else whole


@rule(rf"(?:the\s+)?(?:(?P<part>early|mid|late)[\s-]+)?{_SEASON}\s+(?:of\s+)?{_YEAR}", "season")
def _season_of_year(m, ref):
    whole = _season(m["season"].lower(), int(m["year"]))
    return _part_of(whole, m["part"]) if m["part"] else whole


@rule(rf"(?:(?P<relative>last|this|next|previous|coming|the)\s+)?{_SEASON}(?!-\w|\s+(?:of\b|{_SEASON_NOUNS}))",
      "season")
def _season_name(m, ref):
    return _season_near(m["season"], m["relative"], ref)


def _season_near(name: str, relative: str | None, ref: date) -> TimeRange:
    """A season named with last / this / next / the, or bare: the one under way or just gone."""
    name, relative = name.lower(), (relative or "").lower()
    current = _season_holding(name, ref)  # the latest one started: under way, or the one just gone
    under_way = current.last_day >= ref
    this_one = current if under_way else _season(name, current.first_day.year + 1)  # under way, or coming
    if relative in ("last", "previous"):
        return _season(name, current.first_day.year - 1) if under_way else current
    if relative == "this":
        return this_one
    if relative in ("next", "coming"):
        return _season(name, this_one.first_day.year + 1)
    return current


@rule(r"(?:the\s+)?(?P<year>[12]\d{2}0)'?s|(?:the\s+)?['’]?(?P<short>\d0)'?s", "decade", "year")
def _decade(m, ref):
    # "the 90s" is the 1990s, "the 20s" the 2020s
    year = int(m["year"]) if m["year"] else int(m["short"]) + (1900 if int(m["short"]) >= 30 else 2000)
    return _span(date(year, 1, 1), date(year + 9, 12, 31), "year")


@rule(rf"(?:(?P<part>early|mid|late)[\s-]+)?{_YEAR}", "year")
def _year_number(m, ref):
    whole = _year(int(m["year"]))
    return _part_of(whole, m["part"]) if m["part"] else whole


@rule(rf"(?:(?P<relative>last|this|next|previous|coming)\s+)?{_HOLIDAY}(?:,?\s+{_YEAR})?", "holiday")
def _holiday(m, ref):
    named = HOLIDAYS[re.sub(r"\s+", " ", m["holiday"].lower())]
    if m["year"]:
        day = named(int(m["year"]))
        return _span(day, day, "day")
    relative = (m["relative"] or "").lower()
    days = [named(y) for y in (ref.year - 1, ref.year, ref.year + 1) if 1 <= y <= 9999]
    if relative in ("last", "previous"):
        past = [d for d in days if d < ref]
        return _span(past[-1], past[-1], "day") if past else None
    if relative in ("next", "coming"):
        future = [d for d in days if d > ref]
        return _span(future[0], future[0], "day") if future else None
    if relative == "this":
        day = named(ref.year)
        return _span(day, day, "day")
    return _nearest([_span(d, d, "day") for d in days], ref)


@rule(r"(?:the\s+)?(?P<day>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)(?:\s+of\s+(?:the|this)\s+month)?", "ordinal")
def _day_of_month(m, ref):
    day = int(m["day"])
    index = _month_index(ref.year, ref.month)
    for back in range(0, 3):  # the latest month holding that day, this month first
        month = _month(index - back)
        if day <= month.last_day.day and (back or day <= ref.day):
            found = month.first_day.replace(day=day)
            return _span(found, found, "day")
    return None


@rule(r"(?P<word>recently|lately|the\s+other\s+day|a\s+while\s+(?:ago|back))", "vague")
def _vague(m, ref):
    word = m["word"].lower()
    if word.startswith("the other"):
        return _span(_shift(ref, -7), _shift(ref, -1), "week", 0.5)
    if word.startswith("a while"):
        return _span(_shift(ref, -90), _shift(ref, -14), "month", 0.3)
    return _span(_shift(ref, -30), ref, "month", 0.5)


@rule(rf"{_NUM}\s+{_UNIT}\s+(?P<direction>before|after)\s+(?P<anchor>.+)")
def _shifted(m, ref):
    anchor = resolve_day(m["anchor"], ref)
    if anchor is None:
        return None
    count, unit = _number(m["count"]), m["unit"].lower()
    sign = -1 if m["direction"].lower() == "before" else 1
    # Days and weeks count from the anchor's near edge; months and years from its start.
    base = anchor.last_day if sign > 0 and unit in UNIT_DAYS else anchor.first_day
    return _units_back(base, unit, sign * count)


@rule(r"(?:the\s+)?day\s+(?P<direction>before|after)\s+(?P<anchor>.+)")
def _day_next_to(m, ref):
    anchor = resolve_day(m["anchor"], ref)
    if anchor is None or anchor.granularity != "day":
        return None
    day = _shift(anchor.first_day, -1) if m["direction"].lower() == "before" else _shift(anchor.last_day, 1)
    return _span(day, day, "day")


# --------------------------------------------------------------------------------------------- resolving
_LEADING = re.compile(r"^(?:(?:on|in|at|during|by|around|about|from|of|since|until|till|over)\s+)+", re.IGNORECASE)
_TRAILING = re.compile(r"[\s,.;:!?'\")]+$")


def resolve_day(expression: str, reference: date) -> TimeRange | None:
    """``expression`` (the whole of it, one time expression) resolved against the ``reference`` day."""
    whole = re.sub(r"\s+", " ", _TRAILING.sub("", expression.strip()))
    if not whole or len(whole) > 200:
        return None
    # As written first ("in two weeks" is a rule of its own), then without its preposition ("in May").
    for text in dict.fromkeys((whole, _LEADING.sub("", whole))):
        for pattern, function in RULES:
            match = pattern.fullmatch(text)
            if match:
                try:
                    found = function(match, reference)
                except (ValueError, OverflowError, KeyError, IndexError):
                    found = None  # a date the calendar does not have ("February 30th"): no range
                if found is not None:
                    return found
    return None


def reference_day(reference: datetime | date) -> date:
    """The day of a reference time where it was written: a time with an offset is read on its own calendar
    ("2024-12-01T00:30+14:00" is 1 December, though 30 November in UTC), a naive time as UTC, a date is its
    own day."""
    return reference.date() if isinstance(reference, datetime) else reference


def resolve(expression: str, reference: datetime | date) -> TimeRange | None:
    """One time expression resolved against a reference time; None when the grammar cannot read it."""
    return resolve_day(expression, reference_day(reference))


# ---------------------------------------------------------------------------------------------- finding
# One pass over a text finds the words some rule needs (RULE_NEEDS); only those rules then run over it.
_HOLIDAY_WORDS = r"christmas|easter|halloween|valentine'?s|patrick'?s|independence|fourth\s+of\s+july|thanksgiving|" \
    r"mother'?s\s+day|father'?s\s+day|memorial\s+day|labou?r\s+day|good\s+friday|maundy|palm\s+sunday|" \
    r"ash\s+wednesday|boxing\s+day|new\s+year'?s"
TRIGGERS = re.compile(
    rf"\b(?:(?P<holiday>{_HOLIDAY_WORDS})|(?P<named_day>today|tonight|yesterday|tomorrow|last\s+night|"
    rf"this\s+(?:morning|afternoon|evening))|(?P<unit>(?:day|week|weekend|fortnight|month|year|decade)s?)|"
    rf"(?P<weekday>{_alternation(WEEKDAYS)})|(?P<month>{_alternation(MONTHS)})|"
    rf"(?P<season>spring|summer|fall|autumn|winter)|(?P<vague>recently|lately|other\s+day|while)|"
    rf"(?P<numeric>\d{{1,4}}[/-]\d{{1,2}})|(?P<ordinal>\d{{1,2}}(?:st|nd|rd|th))|(?P<decade>['’]?\d0'?s)|(?P<year>[12]\d{{3}}))\b",
    re.IGNORECASE)
# Words that make a weak match a time: "in May" (not "I may"), "in the fall" (not "a fall"), "in 2019"
# (not "2019 calories"), "on Saturday" said in lower case.
CONTEXT_WORDS = frozenset(["in", "on", "of", "since", "during", "by", "until", "till", "from", "before", "after",
                           "around", "over", "through", "this", "last", "next", "early", "late", "mid", "the",
                           "between", "and", "or", "to"])
MONTH_CONTEXT_WORDS = frozenset(["in", "of", "since", "during", "by", "until", "till", "from", "before", "after",
                                 "around", "through", "early", "late", "mid", "between", "and", "or"])
POSSESSIVES = frozenset(["my", "our", "your", "his", "her", "their"])
HABIT_WORDS = POSSESSIVES | frozenset(["every", "each", "most", "usual", "a", "an"])
_WEEKDAY_SPAN = re.compile(rf"\s*(?:to|through|thru|till|until|[-–])\s*(?:{_alternation(WEEKDAYS)})\b", re.IGNORECASE)
_SPAN_BEFORE = re.compile(rf"\b(?:{_alternation(WEEKDAYS)})\s*(?:to|through|thru|till|until|[-–])\s*$", re.IGNORECASE)
_ANCHORED = {_shifted, _day_next_to}
_SCAN_RULES = [(re.compile(rf"(?<![\w'’/-])(?:{pattern.pattern})(?![\w]|['’](?!s\b)|/\d|-\d)", re.IGNORECASE), function)
               for pattern, function in RULES if function not in _ANCHORED]
_BEFORE_ANCHOR = re.compile(rf"(?:(?:{_NUM}\s+{_UNIT})|(?:the\s+)?day)\s+(?:before|after)\s+$", re.IGNORECASE)
_WORD_BEFORE = re.compile(r"([A-Za-z]+)\W*$")
_WORD_AFTER = re.compile(r"\s+([a-z]+)")
# Month words that are also common English words or names: a time only when written as one.
_AMBIGUOUS_MONTHS = frozenset(["may", "march", "jan", "mar", "sept", "dec", "oct", "nov", "aug", "apr", "jun", "jul",
                               "feb", "sep"])


def _context_words(match: re.Match, function: Rule) -> frozenset[str] | None:
    """The words one of which must come just before ``match`` for it to be a time (None: it is one alone)."""
    groups = match.groupdict()
    if function is _month_name:
        month = groups["month"]
        if groups["year"] or groups["part"] or groups["relative"]:
            return None
        before = _WORD_BEFORE.search(match.string, 0, match.start())
        if before and before.group(1)[0].isupper() and before.group(1).lower() not in CONTEXT_WORDS \
                and not re.search(r"[.!?:;]", match.string[before.end(1):match.start()]):
            return frozenset()
        if month.lower() in _AMBIGUOUS_MONTHS:
            return frozenset() if month.islower() or len(month) <= 4 and month.lower() != "may" \
                else MONTH_CONTEXT_WORDS
        return None
    if function is _season_name:
        return None if groups["relative"] and groups["relative"].lower() != "the" else CONTEXT_WORDS
    if function is _year_number:
        before = _WORD_BEFORE.search(match.string, 0, match.start())
        if before and before.group(1) == "The" and match.string[:before.start(1)].strip():  # "The 1975": a name
            return frozenset()
        return None if groups["part"] else CONTEXT_WORDS
    if function is _decade and groups["short"]:
        # "in his 40s", "in her early 30s": an age, not a decade
        words = re.findall(r"[A-Za-z]+", match.string[max(0, match.start() - 20):match.start()])[-2:]
        if any(word.lower() in POSSESSIVES for word in words):
            return frozenset()
    if function is _numeric_date:
        return None if groups["year"] and len(groups["year"]) == 4 else frozenset(["on"])
    if function is _weekday:
        before = _WORD_BEFORE.search(match.string, 0, match.start())
        # "my Sunday rides", "every Monday" (not "I'll see her on Monday": the word before is not the day's)
        if not groups["relative"] and before is not None and before.group(1).lower() in HABIT_WORDS \
                or _WEEKDAY_SPAN.match(match.string, match.end()) or _SPAN_BEFORE.search(match.string, 0, match.start()):
            return frozenset()
        return CONTEXT_WORDS if match[0].islower() and not groups["relative"] else None
    if function is _day_of_month:
        after = _WORD_AFTER.match(match.string, match.end())  # "the 3rd place" is a rank, not a day
        if after and after.group(1) not in ("of", "at", "and", "or", "to", "when", "i", "we"):
            return frozenset()
        return None if match[0].lower().startswith("the") else frozenset(["on"])
    return None


def find_times(text: str, reference: datetime | date) -> list[Mention]:
    """The time expressions in ``text`` (longest first where they overlap), each resolved against
    ``reference``; expressions the grammar cannot resolve are left out."""
    present = {match.lastgroup for match in TRIGGERS.finditer(text)}
    if not present:
        return []
    ref = reference_day(reference)
    found: list[tuple[int, int, re.Match, Rule]] = []
    for pattern, function in _SCAN_RULES:
        if not RULE_NEEDS[function] & present:
            continue
        for match in pattern.finditer(text):
            context = _context_words(match, function)
            if context is not None:
                before = _WORD_BEFORE.search(text, 0, match.start())
                if before is None or before.group(1).lower() not in context:
                    continue
            found.append((match.start(), match.end(), match, function))
    found.sort(key=lambda item: (-(item[1] - item[0]), item[0]))
    taken: list[Mention] = []
    for start, end, match, _function in found:
        if any(start < m.end and m.start < end for m in taken):
            continue
        anchor = _BEFORE_ANCHOR.search(text, max(0, start - 40), start)
        resolved = None
        if anchor is not None:  # "two days before Christmas": the shift and its anchor together
            resolved = resolve_day(text[anchor.start():end], ref)
            if resolved is not None:
                start = anchor.start()
        if resolved is None:
            resolved = resolve_day(match[0], ref)
            tense = _tense(text, start) if resolved is not None else None
            if resolved is not None and re.search(r"\bsince\s+$", text[max(0, start - 8):start], re.IGNORECASE):
                tense = "past"  # "since March 25th" points back, whatever the clause says of the future
            if tense == "past" and resolved.first_day > ref:
                resolved = _another_occurrence(match, _function, resolved, ref, -1)
            elif tense == "future" and resolved.last_day < ref:
                resolved = _another_occurrence(match, _function, resolved, ref, 1)
        if resolved is not None:
            taken.append(Mention(start, end, text[start:end], resolved))
    return sorted(taken, key=lambda m: m.start)


# What tells that a clause speaks of the past ("When did I go…", "Monday was rough", "I visited…") or of what
# is still to come ("I'll go…", "we are going to…", "I'm thinking of…"): a bare month, date, weekday, holiday
# or season in the past is the last one before the reference day, in the future the next one after it, and
# otherwise the nearest.
_CLAUSE_END = re.compile(r"[.!?;\n]|,\s+(?:and|but|so)\s|\s(?:but|and then)\s|\s(?:and|but)\s+(?=I\b)")
_PAST = re.compile(
    r"\b(?:did|didn't|was|wasn't|were|weren't|went|had|got|came|made|took|saw|met|bought|spent|told|said|gave|"
    r"found|left|felt|ate|ran|wrote|read|heard|thought|began|became|kept|sent|brought|paid|won|lost|sold|held|"
    r"quit|broke|flew|drove|rode|swam|fell|forgot|chose|drank|threw|wore|taught|caught|fought|slept|spoke|stood|"
    r"sat|sang|grew|knew|woke|built|hurt|"
    r"ago|used\s+to|[a-z]{2,}(?<!need)(?<!seed)(?<!feed)(?<!speed)(?<!exceed)(?<!proceed)(?<!succeed)"
    r"(?<!indeed)(?<!breed)(?<!interest)(?<!excit)(?<!bor)(?<!schedul)(?<!plann)(?<!expect)(?<!supposed)ed)\b",
    re.IGNORECASE)
_FUTURE = re.compile(r"\b(?:will|won't|shall|gonna|going\s+to|plan(?:ning|s)?\s+to|planning|hop(?:e|ing)\s+to|"
                     r"want\s+to|would\s+like|next|upcoming|coming|soon|tomorrow|scheduled|expecting|"
                     r"thinking\s+(?:of|about)|considering|could|look(?:ing)?\s+forward)\b|'ll\b", re.IGNORECASE)


def _tense(text: str, position: int) -> str | None:
    """"past" or "future" when the clause around ``position`` speaks only of one of them; None otherwise."""
    starts = [m.end() for m in _CLAUSE_END.finditer(text, 0, position)]
    after = _CLAUSE_END.search(text, position)
    clause = text[starts[-1] if starts else 0:after.start() if after else len(text)]
    past, future = bool(_PAST.search(clause)), bool(_FUTURE.search(clause))
    return "past" if past and not future else "future" if future and not past else None


def _another_occurrence(match: re.Match, function: Rule, found: TimeRange, ref: date, step: int) -> TimeRange:
    """The occurrence of a bare month, date, weekday, holiday or season one period before (``step`` -1) or after
    (+1) ``found``, when that lies on the reference day's side it was asked for; ``found`` otherwise (an
    expression that is not bare, such as "next May" or "June 2025", is kept as read)."""
    groups = match.groupdict()
    if (groups.get("relative") or "on").lower() not in ("on", "the") or groups.get("year"):
        return found
    if function is _weekday:
        moved = _span(_shift(found.first_day, 7 * step), _shift(found.last_day, 7 * step), found.granularity,
                      found.certainty)
    elif function is _holiday:  # Easter and the days counted from it move within the year
        day = HOLIDAYS[re.sub(r"\s+", " ", groups["holiday"].lower())](found.first_day.year + step)
        moved = _span(day, day, found.granularity, found.certainty)
    elif function in _YEARLY:
        moved = _years_away(found, step)
    else:
        return found
    return moved if moved is not None and (moved.first_day <= ref if step < 0 else moved.last_day >= ref) else found


# Kinds whose bare occurrence recurs every year on the same days.
_YEARLY = frozenset([_month_name, _season_name, _part_of_season, _date_in_words, _numeric_date, _days_in_month,
                     _days_before_month])


def _years_away(found: TimeRange, years: int) -> TimeRange | None:
    """The same days ``years`` later (a range ending on a month's last day ends on that month's last day); None
    when a day is not in that year's calendar (29 February)."""
    def moved(day: date, month_end: bool) -> date:
        month = _month(_month_index(day.year, day.month) + 12 * years)
        return month.last_day if month_end else month.first_day.replace(day=day.day)
    last = found.last_day
    ends_a_month = found.days > 1 and last == _month(_month_index(last.year, last.month)).last_day
    try:
        return _span(moved(found.first_day, False), moved(last, ends_a_month), found.granularity, found.certainty)
    except ValueError:
        return None
