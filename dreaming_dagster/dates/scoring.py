"""How well time expressions are found in real sentences and resolved: the scorer of the labelled sets
``tests/data/time_sentences.tsv`` (development), ``time_sentences_heldout.tsv`` and
``time_sentences_haystacks.tsv`` (held out; bench/time_finding.py reports them, tests/test_time.py guards
them).

A found expression matches a labelled one when their spans overlap (one to one, in order); it is resolved
right when its range is the labelled range, day for day. Finding precision is matches over expressions found,
recall matches over expressions labelled; resolving precision and recall count only the matches resolved
right, so a wrong range costs both.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from dreaming_dagster.dates.finding import find_times


@dataclass(frozen=True)
class Labelled:
    reference: date
    sentence: str
    expected: tuple[tuple[int, int, date, date], ...]  # (start, end, first day, last day)


@dataclass
class FindingScore:
    sentences: int = 0
    negatives: int = 0  # sentences naming no date
    labelled: int = 0
    found: int = 0
    matched: int = 0
    resolved: int = 0
    false_alarms: int = 0  # negatives in which something was found
    errors: list[dict] = field(default_factory=list)

    def ratio(self, part: int, whole: int) -> float:
        return round(part / whole, 4) if whole else 1.0

    def as_dict(self) -> dict:
        return {"sentences": self.sentences, "negatives": self.negatives, "labelled": self.labelled,
                "found": self.found, "matched": self.matched, "resolved_right": self.resolved,
                "finding_precision": self.ratio(self.matched, self.found),
                "finding_recall": self.ratio(self.matched, self.labelled),
                "resolving_precision": self.ratio(self.resolved, self.found),
                "resolving_recall": self.ratio(self.resolved, self.labelled),
                "negatives_with_a_false_alarm": self.false_alarms, "errors": self.errors}


def read_labelled(path: Path) -> list[Labelled]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        lines = (line for line in handle if not line.startswith("#"))
        for row in csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE):
            expected = []
            for item in [] if row["expected"] == "-" else row["expected"].split(" | "):
                text, _, days = item.rpartition("=")
                first, _, last = days.partition("..")
                start = row["sentence"].index(text)
                expected.append((start, start + len(text), date.fromisoformat(first), date.fromisoformat(last)))
            rows.append(Labelled(date.fromisoformat(row["reference"]), row["sentence"], tuple(expected)))
    return rows


def score(rows: list[Labelled]) -> FindingScore:
    result = FindingScore(sentences=len(rows))
    for row in rows:
        found = find_times(row.sentence, row.reference)
        result.negatives += not row.expected
        result.false_alarms += bool(found) and not row.expected
        result.labelled += len(row.expected)
        result.found += len(found)
        unmatched = list(row.expected)
        wrong = []
        for mention in found:
            label = next((e for e in unmatched if mention.start < e[1] and e[0] < mention.end), None)
            if label is None:
                wrong.append(f"found {mention.text!r} = {mention.range.first_day}..{mention.range.last_day}")
                continue
            unmatched.remove(label)
            result.matched += 1
            if (mention.range.first_day, mention.range.last_day) == (label[2], label[3]):
                result.resolved += 1
            else:
                wrong.append(f"{mention.text!r} read {mention.range.first_day}..{mention.range.last_day}, "
                             f"expected {label[2]}..{label[3]}")
        wrong += [f"missed {row.sentence[s:e]!r} = {first}..{last}" for s, e, first, last in unmatched]
        if wrong:
            result.errors.append({"reference": row.reference.isoformat(), "sentence": row.sentence, "errors": wrong})
    return result
