"""Time read where people write it: the finder and resolver on real sentences.

    .venv/bin/python bench/time_finding.py

tests/data/time_sentences.tsv holds user turns of the LongMemEval oracle's sessions, each with the time
expressions a careful reader would date and their ranges (or none: "may I", "fall asleep", "on Sundays").
dates/finding.py scores dates/expressions.find_times on them: finding precision and recall (a found
expression overlaps a labelled one), resolving precision and recall (and its range is the labelled one), and
every sentence it gets wrong. Writes bench/results/time_finding.{json,md}.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

from common import ROOT, bench_parser, machine  # first: puts the project on the import path

from dreaming_dagster.dates.finding import read_labelled, score

LABELLED = ROOT / "tests" / "data" / "time_sentences.tsv"


def main() -> None:
    args = bench_parser(__doc__, "time_finding").parse_args()
    rows = read_labelled(LABELLED)
    started = time.perf_counter()
    result = {"command": "bench/time_finding.py " + " ".join(sys.argv[1:]),
              "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(), **score(rows).as_dict()}
    result["microseconds_a_sentence"] = round((time.perf_counter() - started) / len(rows) * 1e6)
    result["labelled_set"] = str(LABELLED.relative_to(ROOT))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# Time read where people write it", "", f"`make bench-time-finding` on `{r['labelled_set']}`: "
             f"{r['sentences']} sentences from user turns of the LongMemEval oracle, {r['negatives']} of them naming "
             f"no date; {r['labelled']} labelled expressions.", "",
             "| | precision | recall |", "|---|---|---|",
             f"| finding (a found expression overlaps a labelled one) | {r['finding_precision']:.3f} | "
             f"{r['finding_recall']:.3f} |",
             f"| resolving (and its range is the labelled range) | {r['resolving_precision']:.3f} | "
             f"{r['resolving_recall']:.3f} |", "",
             f"Found {r['found']}, matched {r['matched']}, resolved right {r['resolved_right']}; sentences naming no "
             f"date with something found: {r['negatives_with_a_false_alarm']}; {r['microseconds_a_sentence']} µs a "
             "sentence.", "", "## Every sentence read wrong", ""]
    lines += [f"- {e['reference']} — {e['sentence']}  \n  {'; '.join(e['errors'])}" for e in r["errors"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
