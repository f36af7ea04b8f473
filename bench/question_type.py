"""The question-type classifier's 5-fold cross-validated accuracy on the LongMemEval oracle.

    .venv/bin/python bench/question_type.py

Trains exactly as `dreaming ranker train-question-type` does (into a temporary file, so the shipped
classifier is untouched). Results: bench/results/question_type.json.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from common import ORACLE, bench_parser, machine  # first: puts the project on the import path

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.retrieval.question_type import train_from_longmemeval
from dreaming_dagster.training.longmemeval import file_sha256


def main() -> None:
    parser = bench_parser(__doc__, "question_type")
    args = parser.parse_args()
    dataset = ORACLE
    with tempfile.TemporaryDirectory() as tmp:
        report = train_from_longmemeval(dataset, LocalMiniLMEmbedder(), Path(tmp) / "question_type.safetensors")
    results = {"command": "bench/question_type.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine(),
               "dataset": dataset.name, "sha256": file_sha256(dataset), "questions": report.questions,
               "cv_accuracy_5_fold": round(report.accuracy, 4),
               "cv_accuracy_per_type": {k: round(v, 4) for k, v in report.per_type.items()}}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
