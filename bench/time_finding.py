"""Time read where people write it: the finder and resolver on real sentences.

    .venv/bin/python bench/time_finding.py

Three labelled sets of sentences, each with the time expressions a careful reader would date and their
ranges (or none: "may I", "fall asleep", "on Sundays"): tests/data/time_sentences.tsv, user turns of the
LongMemEval oracle's sessions, the development set the grammar's rules were corrected on;
tests/data/time_sentences_heldout.tsv, more oracle user turns labelled after the rules were last changed;
tests/data/time_sentences_haystacks.tsv, likewise held out, from the distractor sessions of the _S haystacks. dates/scoring.py scores
dates/finding.find_times on each: finding precision and recall (a found expression overlaps a labelled
one), resolving precision and recall (and its range is the labelled one), and every sentence it gets wrong.
Writes bench/results/time_finding.{json,md}.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

from common import ROOT, bench_parser, machine  # first: puts the project on the import path

from dreaming_dagster.dates.scoring import read_labelled, score

SETS = {"development": ROOT / "tests" / "data" / "time_sentences.tsv",
        "held_out": ROOT / "tests" / "data" / "time_sentences_heldout.tsv",
        "held_out_haystacks": ROOT / "tests" / "data" / "time_sentences_haystacks.tsv",
        "held_out_qualified": ROOT / "tests" / "data" / "time_sentences_qualified.tsv"}


def main() -> None:
    args = bench_parser(__doc__, "time_finding").parse_args()
    result = {"command": "bench/time_finding.py " + " ".join(sys.argv[1:]),
              "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    for name, path in SETS.items():
        rows = read_labelled(path)
        started = time.perf_counter()
        result[name] = score(rows).as_dict() | {"labelled_set": str(path.relative_to(ROOT))}
        result[name]["microseconds_a_sentence"] = round((time.perf_counter() - started) / len(rows) * 1e6)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# Time read where people write it", "", "`make bench-time-finding`: sentences from user turns of the "
             "LongMemEval oracle, the session's day as reference.", "",
             "| set | sentences (naming no date) | expressions | finding precision | finding recall | "
             "resolving precision | resolving recall |", "|---|---|---|---|---|---|---|"]
    for name in SETS:
        s = r[name]
        lines.append(f"| {name.replace('_', ' ')} (`{s['labelled_set']}`) | {s['sentences']} ({s['negatives']}) | "
                     f"{s['labelled']} | {s['finding_precision']:.3f} | {s['finding_recall']:.3f} | "
                     f"{s['resolving_precision']:.3f} | {s['resolving_recall']:.3f} |")
    lines += ["", "The rules were corrected on the development set; the held-out sets were labelled afterwards and "
              "nothing was chosen on them.", ""]
    for name in SETS:
        lines += [f"## Every sentence read wrong: {name.replace('_', ' ')}", ""]
        lines += [f"- {e['reference']} — {e['sentence']}  \n  {'; '.join(e['errors'])}" for e in r[name]["errors"]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
