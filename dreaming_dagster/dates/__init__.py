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
