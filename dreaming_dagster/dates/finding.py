"""Finding the time expressions in a text: a pass over it finds the words some rule needs, only those rules
run, a weak match (a bare "May", a lower-case weekday) counts only after a word that makes it a time, and a bare
date in a clause that speaks only of the past or the future moves to that side of the reference day."""

from __future__ import annotations

import re
from datetime import date, datetime

from dreaming_dagster.dates.grammar import (
    RULE_NEEDS,
    RULES,
    Rule,
    date_in_words,
    day_next_to,
    day_of_month,
    days_before_month,
    days_in_month,
    decade,
    holiday,
    month_name,
    month_of_a_year_in_words,
    numeric_date,
    part_of_season,
    reference_day,
    resolve_day,
    season_name,
    shifted,
    weekday_name,
    year_number,
)
from dreaming_dagster.dates.ranges import Mention, TimeRange, month_index, month_range, shift, span
from dreaming_dagster.dates.vocabulary import HOLIDAYS, MONTHS, NUM, UNIT, WEEKDAYS, alternation

# ---------------------------------------------------------------------------------------------- finding
# One pass over a text finds the words some rule needs (RULE_NEEDS); only those rules then run over it.
_HOLIDAY_WORDS = r"christmas|easter|halloween|valentine'?s|patrick'?s|independence|fourth\s+of\s+july|thanksgiving|" \
    r"mother'?s\s+day|father'?s\s+day|memorial\s+day|labou?r\s+day|good\s+friday|maundy|palm\s+sunday|" \
    r"ash\s+wednesday|boxing\s+day|new\s+year'?s"
TRIGGERS = re.compile(
    rf"\b(?:(?P<holiday>{_HOLIDAY_WORDS})|(?P<named_day>today|tonight|yesterday|tomorrow|last\s+night|"
    rf"this\s+(?:morning|afternoon|evening))|(?P<unit>(?:day|week|weekend|fortnight|month|year|decade)s?)|"
    rf"(?P<weekday>{alternation(WEEKDAYS)})|(?P<month>{alternation(MONTHS)})|"
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
_WEEKDAY_SPAN = re.compile(rf"\s*(?:to|through|thru|till|until|[-–])\s*(?:{alternation(WEEKDAYS)})\b", re.IGNORECASE)
_SPAN_BEFORE = re.compile(rf"\b(?:{alternation(WEEKDAYS)})\s*(?:to|through|thru|till|until|[-–])\s*$", re.IGNORECASE)
_ANCHORED = {shifted, day_next_to}
_SCAN_RULES = [(re.compile(rf"(?<![\w'’/-])(?:{pattern.pattern})(?![\w]|['’](?!s\b)|/\d|-\d)", re.IGNORECASE), function)
               for pattern, function in RULES if function not in _ANCHORED]
_BEFORE_ANCHOR = re.compile(rf"(?:(?:{NUM}\s+{UNIT})|(?:the\s+)?day)\s+(?:before|after)\s+$", re.IGNORECASE)
_WORD_BEFORE = re.compile(r"([A-Za-z]+)\W*$")
_WORD_AFTER = re.compile(r"\s+([a-z]+)")
# Month words that are also common English words or names: a time only when written as one.
_AMBIGUOUS_MONTHS = frozenset(["may", "march", "jan", "mar", "sept", "dec", "oct", "nov", "aug", "apr", "jun", "jul",
                               "feb", "sep"])
# Month words that are also names: "I met June last year" names a person.
_NAME_OR_VERB_MONTHS = _AMBIGUOUS_MONTHS | {"june", "august"}


def _context_words(match: re.Match, function: Rule) -> frozenset[str] | None:
    """The words one of which must come just before ``match`` for it to be a time (None: it is one alone)."""
    groups = match.groupdict()
    if function is month_name:
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
        if month.lower() in _NAME_OR_VERB_MONTHS and not month.islower():  # "I met June": a name
            return MONTH_CONTEXT_WORDS
        return None
    if function is month_of_a_year_in_words and match.start("month") == match.start():
        # "We may this year…", "the troops march next year", "I met Jan last year": verbs and names, unless a
        # word such as "in" says they are months ("in March next year").
        month = groups["month"].lower()
        if month in _AMBIGUOUS_MONTHS and groups["month"].islower():
            return frozenset()
        return MONTH_CONTEXT_WORDS if month in _NAME_OR_VERB_MONTHS else None
    if function is season_name:
        return None if groups["relative"] and groups["relative"].lower() != "the" else CONTEXT_WORDS
    if function is year_number:
        before = _WORD_BEFORE.search(match.string, 0, match.start())
        if before and before.group(1) == "The" and match.string[:before.start(1)].strip():  # "The 1975": a name
            return frozenset()
        return None if groups["part"] else CONTEXT_WORDS
    if function is decade and groups["short"]:
        # "in his 40s", "in her early 30s": an age, not a decade
        words = re.findall(r"[A-Za-z]+", match.string[max(0, match.start() - 20):match.start()])[-2:]
        if any(word.lower() in POSSESSIVES for word in words):
            return frozenset()
    if function is numeric_date:
        return None if groups["year"] and len(groups["year"]) == 4 else frozenset(["on"])
    if function is weekday_name:
        before = _WORD_BEFORE.search(match.string, 0, match.start())
        # "my Sunday rides", "every Monday" (not "I'll see her on Monday": the word before is not the day's)
        if not groups["relative"] and before is not None and before.group(1).lower() in HABIT_WORDS \
                or _WEEKDAY_SPAN.match(match.string, match.end()) or _SPAN_BEFORE.search(match.string, 0, match.start()):
            return frozenset()
        return CONTEXT_WORDS if match[0].islower() and not groups["relative"] else None
    if function is day_of_month:
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
    if function is weekday_name:
        moved = span(shift(found.first_day, 7 * step), shift(found.last_day, 7 * step), found.granularity,
                      found.certainty)
    elif function is holiday:  # Easter and the days counted from it move within the year
        year = found.first_day.year + step
        if not 1 <= year <= 9999:  # a year before 1 or after 9999: keep what was read
            return found
        day = HOLIDAYS[re.sub(r"\s+", " ", groups["holiday"].lower())](year)
        moved = span(day, day, found.granularity, found.certainty)
    elif function in _YEARLY:
        moved = _years_away(found, step)
    else:
        return found
    return moved if moved is not None and (moved.first_day <= ref if step < 0 else moved.last_day >= ref) else found


# Kinds whose bare occurrence recurs every year on the same days.
_YEARLY = frozenset([month_name, season_name, part_of_season, date_in_words, numeric_date, days_in_month,
                     days_before_month])


def _years_away(found: TimeRange, years: int) -> TimeRange | None:
    """The same days ``years`` later (a range ending on a month's last day ends on that month's last day); None
    when a day is not in that year's calendar (29 February)."""
    def moved(day: date, month_end: bool) -> date:
        month = month_range(month_index(day.year, day.month) + 12 * years)
        return month.last_day if month_end else month.first_day.replace(day=day.day)
    last = found.last_day
    ends_a_month = found.days > 1 and last == month_range(month_index(last.year, last.month)).last_day
    try:
        return span(moved(found.first_day, False), moved(last, ends_a_month), found.granularity, found.certainty)
    except ValueError:
        return None
