"""The words of time the grammar knows: weekdays, months, numbers, units, holidays (with their dates), and the
regular-expression pieces the rules are written with."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

from dateutil.easter import easter

from dreaming_dagster.dates.ranges import nth_weekday

# Words after a season that make it a kind of thing, not a time ("fall foliage", "summer drinks", "fall asleep").
SEASON_NOUNS = r"(?:asleep|apart|behind|down|off|over|foliage|colou?rs?|leaves|collection|clothes|wardrobe|coats?|" \
    r"jackets?|fashion|menu|drinks?|recipes?|vegetables|produce|squash|flowers|allergies|fling|sale)\b"


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


def count_of(text: str) -> int:
    text = text.strip().lower()
    return int(text) if text.isdigit() else NUMBERS[text]


def alternation(words) -> str:
    return "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))


WEEKDAY = rf"(?P<weekday>{alternation(WEEKDAYS)})"
FULL_MONTHS = [name for name in MONTHS if len(name) > 4 or name in ("may", "june", "july")]
MONTH = rf"(?P<month>{alternation(MONTHS)})\.?"
NUM = rf"(?P<count>\d{{1,6}}|{alternation(NUMBERS)})"
UNIT = r"(?P<unit>day|week|fortnight|month|year|decade)s?"
DAY = r"(?P<day>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
YEAR = r"(?P<year>[12]\d{3})"
PERIOD = r"(?P<period>week|month|year|weekend)"
SEASON = r"(?P<season>spring|summer|fall|autumn|winter)"
RELATIVE = r"(?P<relative>last|this|next|past|previous|coming)"
PART = r"(?P<part>early|earlier|mid|middle|late|later|beginning|start|end)"

HOLIDAY_NOUNS = r"horror|theme|themed|decorations?|costumes?|movies?|candy|specials?|sales?|cards?|tree|lights|" \
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
    "thanksgiving": lambda y: nth_weekday(y, 11, 3, 4),
    "thanksgiving day": lambda y: nth_weekday(y, 11, 3, 4),
    "mother's day": lambda y: nth_weekday(y, 5, 6, 2),
    "mothers day": lambda y: nth_weekday(y, 5, 6, 2),
    "father's day": lambda y: nth_weekday(y, 6, 6, 3),
    "fathers day": lambda y: nth_weekday(y, 6, 6, 3),
    "memorial day": lambda y: nth_weekday(y, 5, 0, -1),
    "labor day": lambda y: nth_weekday(y, 9, 0, 1),
    "labour day": lambda y: nth_weekday(y, 9, 0, 1),
}
HOLIDAY = rf"(?P<holiday>{alternation(HOLIDAYS)})(?!-|\s+(?:{HOLIDAY_NOUNS})\b)"
