"""The grammar's rules: each a pattern, the words it cannot match without, the phrases it reads (tested), and
the function that resolves a match against a reference day. :func:`resolve` reads one whole expression."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date, datetime

from dreaming_dagster.dates.ranges import (
    LAST_DAY,
    TimeRange,
    clamp,
    month_index,
    month_range,
    nearest,
    part_of,
    period_range,
    season_holding,
    season_range,
    shift,
    span,
    week_of,
    year_range,
)
from dreaming_dagster.dates.vocabulary import (
    DAY,
    HOLIDAY,
    HOLIDAYS,
    MONTH,
    MONTHS,
    NUM,
    ORDINAL_WORDS,
    PART,
    PERIOD,
    RELATIVE,
    SEASON,
    SEASON_NOUNS,
    UNIT,
    UNIT_DAYS,
    UNIT_GRANULARITY,
    WEEKDAY,
    WEEKDAYS,
    YEAR,
    count_of,
)

Rule = Callable[[re.Match, date], TimeRange | None]
RULES: list[tuple[re.Pattern, Rule]] = []
# The words a rule cannot match without (a category of TRIGGERS below): find_times runs a rule over a text
# only when one of them is in it.
RULE_NEEDS: dict[Rule, frozenset[str]] = {}
# Each pattern's function and the phrases it reads, written beside it (tests/test_time.py reads every one).
RULE_EXAMPLES: list[tuple[re.Pattern, Rule, tuple[str, ...]]] = []


def rule(pattern: str, *needs: str, examples: tuple[str, ...]) -> Callable[[Rule], Rule]:
    def register(function: Rule) -> Rule:
        compiled = re.compile(rf"(?:{pattern})", re.IGNORECASE)
        RULES.append((compiled, function))
        RULE_NEEDS[function] = RULE_NEEDS.get(function, frozenset()) | frozenset(needs)
        RULE_EXAMPLES.append((compiled, function, examples))
        return function
    return register



@rule(r"by\s+the\s+end\s+of\s+(?:the\s+day|today)", "named_day", "unit",
      examples=("by the end of the day", "by the end of today"))
def _end_of_today(m, ref):
    return span(ref, ref, "day")


@rule(r"(?:the\s+)?day\s+before\s+yesterday", "named_day", examples=("the day before yesterday",))
def _day_before_yesterday(m, ref):
    return span(shift(ref, -2), shift(ref, -2), "day")


@rule(r"(?:the\s+)?day\s+after\s+tomorrow", "named_day", examples=("day after tomorrow",))
def _day_after_tomorrow(m, ref):
    return span(shift(ref, 2), shift(ref, 2), "day")


@rule(r"(?P<word>today|tonight|yesterday|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening))"
      r"(?:\s+(?:morning|afternoon|evening|night))?", "named_day",
      examples=("yesterday", "tonight", "last night", "this morning", "tomorrow evening"))
def _named_day(m, ref):
    word = m["word"].lower()
    offset = -1 if word.startswith(("yesterday", "last")) else 1 if word == "tomorrow" else 0
    return span(shift(ref, offset), shift(ref, offset), "day")


VAGUE_COUNTS = ("a couple of", "a couple", "couple of", "a few", "few", "several")


def _vague_count(text: str) -> bool:
    return re.sub(r"\s+", " ", text.strip().lower()) in VAGUE_COUNTS


def _units_back(ref: date, unit: str, count: int) -> TimeRange:
    """The day, week, month or year ``count`` units after ``ref`` (negative: before)."""
    if unit in UNIT_DAYS:
        day = shift(ref, count * UNIT_DAYS[unit])
        return span(day, day, "day") if unit == "day" else week_of(day)
    if unit == "month":
        return month_range(month_index(ref.year, ref.month) + count)
    return year_range(ref.year + count * (10 if unit == "decade" else 1))


@rule(r"(?:the\s+)?week\s+before\s+last", "unit", examples=("the week before last",))
def _week_before_last(m, ref):
    return week_of(shift(ref, -14))


@rule(rf"{NUM}\s+{UNIT}\s+(?P<direction>ago|back|earlier|from\s+now|later)", "unit",
      examples=("two weeks ago", "3 days back", "a few months ago", "ten years from now"))
# "in two weeks" (not "in a day", which is mostly a duration: "twice in a day").
@rule(rf"(?P<direction>in)\s+(?!an?\s+(?:day|week|fortnight|month|year|decade)){NUM}\s+{UNIT}(?:'?s)?(?:\s+time)?", "unit",
      examples=("in two weeks", "in a couple of months", "in 3 days time"))
def _units_away(m, ref):
    count, unit = count_of(m["count"]), m["unit"].lower()
    sign = 1 if m["direction"].lower() in ("in", "from now", "later") else -1
    if _vague_count(m["count"]):
        # "a few weeks ago": one unit either side of the count, at the unit's granularity
        near, far = _units_back(ref, unit, sign * (count - 1)), _units_back(ref, unit, sign * (count + 1))
        first, last = (far, near) if sign < 0 else (near, far)
        return span(first.first_day, last.last_day, UNIT_GRANULARITY[unit], 0.7)
    return _units_back(ref, unit, sign * count)


@rule(rf"(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?(?:last|past|previous)\s+(?:{NUM}\s+)?{UNIT}", "unit",
      examples=("in the last three months", "over the past few weeks", "last month", "the past year"))
def _rolling(m, ref):
    # "the last month" (no count) is the 30 days to now; "last month" (no article) is the calendar month.
    count = count_of(m["count"]) if m["count"] else 1
    unit = m["unit"].lower()
    if not m["count"] and not re.match(r"(?:(?:in|over|during|within|for)\s+)?the\s", m[0], re.IGNORECASE):
        if unit in ("week", "month", "year"):
            return period_range(unit, "last", ref)
        return None
    if unit in UNIT_DAYS:
        first = shift(ref, -count * UNIT_DAYS[unit])
    elif unit == "month":
        back = month_range(month_index(ref.year, ref.month) - count)
        first = back.first_day.replace(day=min(ref.day, back.last_day.day))
    else:
        years = count * (10 if unit == "decade" else 1)
        first = clamp(date(max(ref.year - years, 1), ref.month, min(ref.day, 28)).toordinal())
    return span(first, ref, UNIT_GRANULARITY[unit], 0.8 if m["count"] and _vague_count(m["count"]) else 1.0)


@rule(rf"(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?(?:next|coming|following)\s+{NUM}\s+{UNIT}", "unit",
      examples=("the next three days", "over the next few weeks"))
def _rolling_ahead(m, ref):
    """"the next three days", "over the next few weeks": from the reference day to as far ahead."""
    count, unit = count_of(m["count"]), m["unit"].lower()
    if unit in UNIT_DAYS:
        last = shift(ref, count * UNIT_DAYS[unit])
    elif unit == "month":
        ahead = month_range(month_index(ref.year, ref.month) + count)
        last = ahead.first_day.replace(day=min(ref.day, ahead.last_day.day))
    else:
        last = clamp(date(min(ref.year + count * (10 if unit == "decade" else 1), 9999), ref.month,
                           min(ref.day, 28)).toordinal())
    return span(ref, last, UNIT_GRANULARITY[unit], 0.8 if _vague_count(m["count"]) else 1.0)


@rule(rf"{NUM}\s+weekends?\s+ago", "unit", examples=("two weekends ago",))
def _weekends_ago(m, ref):
    saturday = shift(week_of(ref).first_day, 5 - 7 * count_of(m["count"]))
    return span(saturday, shift(saturday, 1), "day", 0.7 if _vague_count(m["count"]) else 1.0)


@rule(rf"(?:the\s+)?{PART}\s+of\s+(?:the\s+)?{SEASON}(?:,?\s+(?:of\s+)?{YEAR})?", "season",
      examples=("the end of the summer", "the middle of winter 2021"))
def part_of_season(m, ref):
    whole = season_range(m["season"].lower(), int(m["year"])) if m["year"] else _season_near(m["season"], None, ref)
    return part_of(whole, m["part"])


@rule(rf"(?:the\s+)?{PART}\s+(?:of\s+)?(?:the\s+)?{RELATIVE}?\s*{PERIOD}", "unit",
      examples=("early last month", "the end of the year", "later this week"))
def _part_of_period(m, ref):
    if m["part"].lower() in ("earlier", "later"):
        whole = period_range(m["period"], m["relative"] or "this", ref)
        if m["part"].lower() == "earlier":
            return span(whole.first_day, ref, whole.granularity if whole.granularity != "year" else "month")
        return span(ref, whole.last_day, whole.granularity if whole.granularity != "year" else "month")
    return part_of(period_range(m["period"], m["relative"] or "this", ref), m["part"])


@rule(rf"(?:the\s+)?(?P<nth>first|second|third|fourth|last)\s+(?P<period>week|weekend)\s+(?:of|in)\s+{MONTH}"
      rf"(?:,?\s+{YEAR})?", "month", examples=("the first week of May", "the last weekend in June 2023"))
def _week_of_month(m, ref):
    month = _month_of(m, ref)
    first, last = month.first_day, month.last_day
    nth = ORDINAL_WORDS[m["nth"].lower()]
    if m["period"].lower() == "weekend":
        saturdays = [d for d in range(first.day, last.day + 1) if first.replace(day=d).weekday() == 5]
        saturday = first.replace(day=saturdays[nth if nth < 0 else nth - 1])
        return span(saturday, min(shift(saturday, 1), LAST_DAY), "day")
    if nth < 0:
        return span(last.replace(day=last.day - 6), last, "week")
    return span(first.replace(day=7 * nth - 6), first.replace(day=min(7 * nth, last.day)), "week")


@rule(r"(?:this|last|next|coming|previous|the)\s+(?:long\s+)?weekend", "unit",
      examples=("this weekend", "the long weekend", "last weekend"))
def _weekend(m, ref):
    words = m[0].lower().split()
    if words[0] in ("this", "last", "next", "coming", "previous"):
        return period_range("weekend", words[0], ref)
    # A bare "the weekend": the one under way, the one just gone (Monday to Wednesday) or the coming one.
    return period_range("weekend", "this" if ref.weekday() >= 3 else "last", ref)


@rule(rf"{RELATIVE}\s+{PERIOD}", "unit", examples=("next week", "last year", "this month"))
def _relative_period(m, ref):
    return period_range(m["period"], m["relative"], ref)


# Not "Sundays", "Saturday mornings" or "Sunday brunches" (habits), nor "Sunday best" or "Monday blues" (no
# day at all); but "Monday was rough" and "Friday is my day off" are days: a word ending in "s" after the
# weekday is a plural noun unless it is one of the verbs a weekday is the subject of.
_WEEKDAY_VERBS = r"is|was|has|does|goes|seems|sounds|looks|works|suits|means|feels|starts|begins|ends"
@rule(rf"(?:(?P<relative>last|this|next|coming|previous|on|the)\s+)?{WEEKDAY}"
      rf"(?!s\b|\s+(?!(?:{_WEEKDAY_VERBS})\b)[a-z]+s\b|\s+(?:best|school|blues|roast|league|night\s+live)\b)"
      r"(?:\s+(?:morning|afternoon|evening|night))?", "weekday",
      examples=("last Saturday", "on Monday", "next Friday evening", "Sunday"))
def weekday_name(m, ref):
    target = WEEKDAYS[m["weekday"].lower()]
    relative = (m["relative"] or "").lower()
    back = (ref.weekday() - target) % 7 or 7  # days back to the latest such day before today
    if relative in ("last", "previous"):
        day = shift(ref, -back)
    elif relative == "this":
        day = shift(week_of(ref).first_day, target)
    elif relative in ("next", "coming"):
        day = shift(ref, 7 - back if back != 7 else 7)
    else:
        if ref.weekday() == target:
            return span(ref, ref, "day", 0.8)
        ahead = 7 - back
        day = shift(ref, -back) if back <= ahead else shift(ref, ahead)
        return span(day, day, "day", 0.8)
    return span(day, day, "day")


def _month_of(m, ref: date, relative: str | None = None) -> TimeRange:
    month = MONTHS[m["month"].lower()]
    if m["year"]:
        return month_range(month_index(int(m["year"]), month))
    relative = (relative or "").lower()
    this_year = month_index(ref.year, month)
    now = month_index(ref.year, ref.month)
    if relative in ("last", "previous", "past"):
        return month_range(this_year if this_year < now else this_year - 12)
    if relative == "this":
        return month_range(this_year)
    if relative in ("next", "coming"):
        return month_range(this_year if this_year > now else this_year + 12)
    return nearest([month_range(this_year - 12), month_range(this_year), month_range(this_year + 12)], ref)


def _day_in_month(m, ref: date) -> TimeRange | None:
    month, day = MONTHS[m["month"].lower()], int(m["day"])
    years = [int(m["year"])] if m["year"] else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and day <= calendar.monthrange(y, month)[1]]
    if not days:
        return None
    return nearest([span(d, d, "day") for d in days], ref)


# Days of one month: "March 15-16", "February 10th and 11th", "June 3 to 5, 2022".
@rule(rf"{MONTH}\s+(?:the\s+)?{DAY}\s*(?P<joint>-|–|to|through|till|until|and)\s*(?:the\s+)?"
      rf"(?P<last>[12]\d|3[01]|0?[1-9])(?P<suffix>st|nd|rd|th)?(?:,?\s+{YEAR})?(?![\d:])", "month",
      examples=("March 15-16", "February 10th and 11th", "June 3 to 5, 2022"))
def days_in_month(m, ref):
    if m["joint"].lower() == "and" and not m["suffix"]:  # "on May 3 and 4 people came": a count, not a day
        return None
    first, last = int(m["day"]), int(m["last"])
    start = _day_in_month(m, ref)
    if start is None or not first < last <= calendar.monthrange(start.first_day.year, start.first_day.month)[1]:
        return None
    return span(start.first_day, start.first_day.replace(day=last), "day")


@rule(rf"(?:the\s+)?{DAY}\s*(?P<joint>-|–|to|through|till|until|and)\s*(?:the\s+)?(?P<last>[12]\d|3[01]|0?[1-9])"
      rf"(?P<suffix>st|nd|rd|th)?\s+(?:of\s+)?{MONTH}(?:,?\s+{YEAR})?", "month",
      examples=("the 10th to the 12th of May", "3-5 June 2022"))
def days_before_month(m, ref):
    return days_in_month(m, ref)


@rule(rf"{MONTH}\s+(?:the\s+)?{DAY}(?:,?\s+{YEAR})?(?![\d:])", "month", examples=("June 3", "May 6th, 2023"))
@rule(rf"(?:the\s+)?{DAY}\s+(?:of\s+)?{MONTH}(?:,?\s+{YEAR})?", "month",
      examples=("the 3rd of June", "4 July 2021"))
def date_in_words(m, ref):
    return _day_in_month(m, ref)


# A weekday and its date, one day: "Monday, May 6th", "Saturday the 4th of May". Without a year, the year
# whose date falls on that weekday, the nearest such (else the nearest date).
@rule(rf"{WEEKDAY},?\s+(?:the\s+)?{MONTH}\s+{DAY}(?:,?\s+{YEAR})?(?![\d:])", "weekday",
      examples=("Monday, May 6th", "Friday June 7, 2024"))
@rule(rf"{WEEKDAY},?\s+(?:the\s+)?{DAY}\s+(?:of\s+)?{MONTH}(?:,?\s+{YEAR})?", "weekday",
      examples=("Saturday the 4th of May",))
def _weekday_and_date(m, ref):
    month, day, weekday = MONTHS[m["month"].lower()], int(m["day"]), WEEKDAYS[m["weekday"].lower()]
    years = [int(m["year"])] if m["year"] else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and day <= calendar.monthrange(y, month)[1]]
    on_the_weekday = [d for d in days if d.weekday() == weekday]
    chosen = on_the_weekday or days
    return nearest([span(d, d, "day") for d in chosen], ref) if chosen else None


# A month or a date qualified by a year said in words: "August last year", "March of this year", "last year in
# August", "May 6th next year".
_YEAR_WORDS = r"(?P<relative>last|this|next|previous)\s+year"


@rule(rf"{MONTH}(?:\s+(?:the\s+)?{DAY})?,?\s+(?:of\s+)?{_YEAR_WORDS}", "month",
      examples=("August last year", "March of this year", "May 6th next year"))
@rule(rf"{_YEAR_WORDS},?\s+in\s+{MONTH}(?:\s+(?:the\s+)?{DAY})?", "month", examples=("last year in August",))
def month_of_a_year_in_words(m, ref):
    year = ref.year + {"last": -1, "previous": -1, "this": 0, "next": 1}[m["relative"].lower()]
    month = MONTHS[m["month"].lower()]
    if m["day"]:
        day = int(m["day"])
        return span(date(year, month, day), date(year, month, day), "day") \
            if day <= calendar.monthrange(year, month)[1] else None
    return month_range(month_index(year, month))


@rule(r"(?P<year>[12]\d{3})-(?P<month_number>[01]?\d)-(?P<day>[0-3]?\d)", "numeric", examples=("2023-05-06",))
@rule(r"(?P<month_number>[01]?\d)/(?P<day>[0-3]?\d)(?:/(?P<year>\d{4}|\d{2}))?(?![\d/])", "numeric",
      examples=("5/6", "12/25/2022"))
def numeric_date(m, ref):
    month, day = int(m["month_number"]), int(m["day"])
    if not 1 <= month <= 12:
        return None
    year = m["year"]
    if year and len(year) == 2:
        year = str(2000 + int(year))
    years = [int(year)] if year else [ref.year - 1, ref.year, ref.year + 1]
    days = [date(y, month, day) for y in years if 1 <= y <= 9999 and 1 <= day <= calendar.monthrange(y, month)[1]]
    return nearest([span(d, d, "day") for d in days], ref) if days else None


@rule(rf"(?:(?P<part>early|mid|late|the\s+beginning\s+of|the\s+start\s+of|the\s+middle\s+of|the\s+end\s+of)[\s-]+)?"
      rf"(?:(?P<relative>last|this|next|previous|coming)\s+)?{MONTH}(?:,?\s+(?:of\s+)?{YEAR})?", "month",
      examples=("May", "early June", "the end of March", "next April", "September 2021"))
def month_name(m, ref):
    whole = _month_of(m, ref, m["relative"])
    # "the beginning of" → "beginning"
    return part_of(whole, m["part"].split()[-2] if " " in m["part"] else m["part"]) if m["part"] else whole


@rule(rf"(?:the\s+)?(?:(?P<part>early|mid|late)[\s-]+)?{SEASON}\s+(?:of\s+)?{YEAR}", "season",
      examples=("summer 2021", "the late winter of 2020"))
def _season_of_year(m, ref):
    whole = season_range(m["season"].lower(), int(m["year"]))
    return part_of(whole, m["part"]) if m["part"] else whole


@rule(rf"(?:(?P<relative>last|this|next|previous|coming|the)\s+)?{SEASON}(?!-\w|\s+(?:of\b|{SEASON_NOUNS}))",
      "season", examples=("last summer", "the fall", "winter"))
def season_name(m, ref):
    return _season_near(m["season"], m["relative"], ref)


def _season_near(name: str, relative: str | None, ref: date) -> TimeRange:
    """A season named with last / this / next / the, or bare: the one under way or just gone."""
    name, relative = name.lower(), (relative or "").lower()
    current = season_holding(name, ref)  # the latest one started: under way, or the one just gone
    under_way = current.last_day >= ref
    this_one = current if under_way else season_range(name, current.first_day.year + 1)  # under way, or coming
    if relative in ("last", "previous"):
        return season_range(name, current.first_day.year - 1) if under_way else current
    if relative == "this":
        return this_one
    if relative in ("next", "coming"):
        return season_range(name, this_one.first_day.year + 1)
    return current


@rule(r"(?:the\s+)?(?P<year>[12]\d{2}0)'?s|(?:the\s+)?['’]?(?P<short>\d0)'?s", "decade", "year",
      examples=("the 1990s", "the 90s", "'80s"))
def decade(m, ref):
    # "the 90s" is the 1990s, "the 20s" the 2020s
    year = int(m["year"]) if m["year"] else int(m["short"]) + (1900 if int(m["short"]) >= 30 else 2000)
    return span(date(year, 1, 1), date(year + 9, 12, 31), "year")


@rule(rf"(?:(?P<part>early|mid|late)[\s-]+)?{YEAR}", "year", examples=("2019", "early 2020"))
def year_number(m, ref):
    whole = year_range(int(m["year"]))
    return part_of(whole, m["part"]) if m["part"] else whole


@rule(rf"(?:(?P<relative>last|this|next|previous|coming)\s+)?{HOLIDAY}(?:,?\s+{YEAR})?", "holiday",
      examples=("Christmas Eve", "last Easter", "Thanksgiving 2022"))
def holiday(m, ref):
    named = HOLIDAYS[re.sub(r"\s+", " ", m["holiday"].lower())]
    if m["year"]:
        day = named(int(m["year"]))
        return span(day, day, "day")
    relative = (m["relative"] or "").lower()
    days = [named(y) for y in (ref.year - 1, ref.year, ref.year + 1) if 1 <= y <= 9999]
    if relative in ("last", "previous"):
        past = [d for d in days if d < ref]
        return span(past[-1], past[-1], "day") if past else None
    if relative in ("next", "coming"):
        future = [d for d in days if d > ref]
        return span(future[0], future[0], "day") if future else None
    if relative == "this":
        day = named(ref.year)
        return span(day, day, "day")
    return nearest([span(d, d, "day") for d in days], ref)


@rule(r"(?:the\s+)?(?P<day>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)(?:\s+of\s+(?:the|this)\s+month)?", "ordinal",
      examples=("the 3rd", "the 15th of this month"))
def day_of_month(m, ref):
    day = int(m["day"])
    index = month_index(ref.year, ref.month)
    for back in range(0, 3):  # the latest month holding that day, this month first
        month = month_range(index - back)
        if day <= month.last_day.day and (back or day <= ref.day):
            found = month.first_day.replace(day=day)
            return span(found, found, "day")
    return None


@rule(r"(?P<word>recently|lately|the\s+other\s+day|a\s+while\s+(?:ago|back))", "vague",
      examples=("recently", "the other day", "a while ago"))
def _vague(m, ref):
    word = m["word"].lower()
    if word.startswith("the other"):
        return span(shift(ref, -7), shift(ref, -1), "week", 0.5)
    if word.startswith("a while"):
        return span(shift(ref, -90), shift(ref, -14), "month", 0.3)
    return span(shift(ref, -30), ref, "month", 0.5)


@rule(rf"{NUM}\s+{UNIT}\s+(?P<direction>before|after)\s+(?P<anchor>.+)",
      examples=("two days before Christmas", "3 weeks after Easter"))
def shifted(m, ref):
    anchor = resolve_day(m["anchor"], ref)
    if anchor is None:
        return None
    count, unit = count_of(m["count"]), m["unit"].lower()
    sign = -1 if m["direction"].lower() == "before" else 1
    # Days and weeks count from the anchor's near edge; months and years from its start.
    base = anchor.last_day if sign > 0 and unit in UNIT_DAYS else anchor.first_day
    return _units_back(base, unit, sign * count)


@rule(r"(?:the\s+)?day\s+(?P<direction>before|after)\s+(?P<anchor>.+)",
      examples=("the day before Christmas", "day after New Year's Day"))
def day_next_to(m, ref):
    anchor = resolve_day(m["anchor"], ref)
    if anchor is None or anchor.granularity != "day":
        return None
    day = shift(anchor.first_day, -1) if m["direction"].lower() == "before" else shift(anchor.last_day, 1)
    return span(day, day, "day")


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
