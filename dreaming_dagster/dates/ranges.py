"""Days and ranges of days: the TimeRange every reading resolves to, and the calendar arithmetic the rules use
(months, years, Monday-to-Sunday weeks, northern meteorological seasons, parts of a period), clamped to the years
1–9999."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date

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


def clamp(day_number: int) -> date:
    return date.fromordinal(min(max(day_number, FIRST_DAY.toordinal()), LAST_DAY.toordinal()))


def shift(day: date, days: int) -> date:
    return clamp(day.toordinal() + days)


def span(first: date | int, last: date | int, granularity: str, certainty: float = 1.0) -> TimeRange:
    first = first if isinstance(first, date) else clamp(first)
    last = last if isinstance(last, date) else clamp(last)
    return TimeRange(first, max(first, last), granularity, certainty)


def month_index(year: int, month: int) -> int:
    return year * 12 + month - 1


def month_range(index: int) -> TimeRange:
    index = min(max(index, month_index(1, 1)), month_index(9999, 12))
    year, month = divmod(index, 12)
    return span(date(year, month + 1, 1), date(year, month + 1, calendar.monthrange(year, month + 1)[1]), "month")


def year_range(year: int) -> TimeRange:
    """The calendar year (clamped to 1–9999)."""
    year = min(max(year, 1), 9999)
    return span(date(year, 1, 1), date(year, 12, 31), "year")


def week_of(day: date) -> TimeRange:
    monday = day.toordinal() - day.weekday()
    return span(monday, monday + 6, "week")


SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


def season_range(name: str, year: int) -> TimeRange:
    """The season starting in ``year`` (winter: December of ``year`` to February of the next)."""
    start = month_index(year, SEASON_START[name])
    return span(month_range(start).first_day, month_range(start + 2).last_day, "season")


def season_holding(name: str, day: date) -> TimeRange:
    """The latest ``name`` season starting on or before ``day``."""
    year = day.year if day.month >= SEASON_START[name] else day.year - 1
    return season_range(name, year)


def nearest(candidates: list[TimeRange], reference: date) -> TimeRange:
    """The candidate nearest the reference day (one holding it first; ties to the past)."""
    def distance(r: TimeRange) -> tuple[int, int]:
        if r.first_day <= reference <= r.last_day:
            return 0, 0
        if r.last_day < reference:
            return (reference - r.last_day).days, 0
        return (r.first_day - reference).days, 1
    return min(candidates, key=distance)



def nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The ``n``-th ``weekday`` (0 Monday) of the month; n = -1: the last."""
    days = [d for d in range(1, calendar.monthrange(year, month)[1] + 1) if date(year, month, d).weekday() == weekday]
    return date(year, month, days[n if n < 0 else n - 1])



def part_of(whole: TimeRange, part: str) -> TimeRange:
    """early / mid / late (beginning / middle / end) of a year (its thirds), a season (its months), a month
    (days 1–10, 11–20, 21–end) or a week (its first, middle, last days)."""
    part = {"earlier": "early", "beginning": "early", "start": "early", "middle": "mid", "later": "late",
            "end": "late"}.get(part.lower(), part.lower())
    if whole.granularity == "year":
        year = whole.first_day.year
        months = {"early": (1, 4), "mid": (5, 8), "late": (9, 12)}[part]
        return span(date(year, months[0], 1), month_range(month_index(year, months[1])).last_day, "month")
    if whole.granularity == "season":  # its first, middle or last month
        start = month_index(whole.first_day.year, whole.first_day.month) + {"early": 0, "mid": 1, "late": 2}[part]
        return month_range(start)
    if whole.granularity == "month":
        first, last = whole.first_day, whole.last_day
        days = {"early": (1, 10), "mid": (11, 20), "late": (21, last.day)}[part]
        return span(first.replace(day=days[0]), first.replace(day=days[1]), "day")
    thirds = {"early": (0, 2), "mid": (2, 4), "late": (4, whole.days - 1)}[part]
    return span(shift(whole.first_day, thirds[0]), shift(whole.first_day, min(thirds[1], whole.days - 1)), "day")


def period_range(name: str, relative: str, ref: date) -> TimeRange:
    """this / last / next week, weekend, month or year."""
    step = {"last": -1, "previous": -1, "past": -1, "this": 0, "coming": 1, "next": 1}[relative.lower()]
    name = name.lower()
    if name == "week":
        return week_of(shift(ref, 7 * step))
    if name == "weekend":
        saturday = shift(week_of(ref).first_day, 5 + 7 * step)
        return span(saturday, shift(saturday, 1), "day")
    if name == "month":
        return month_range(month_index(ref.year, ref.month) + step)
    return year_range(ref.year + step)
