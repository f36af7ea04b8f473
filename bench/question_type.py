"""The question-type classifier's 5-fold cross-validated accuracy on the LongMemEval oracle.

    .venv/bin/python bench/question_type.py

Trains exactly as `dreaming ranker train-question-type` does (into a temporary file, so the shipped
classifier is untouched). Results: bench/results/question_type.json.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dreaming_dagster.demo import default_dataset_path  # noqa: E402
from dreaming_dagster.embeddings import LocalMiniLMEmbedder  # noqa: E402
from dreaming_dagster.retrieval.question_type import train_from_longmemeval  # noqa: E402
from dreaming_dagster.training.longmemeval import file_sha256  # noqa: E402


def main() -> None:
    dataset = default_dataset_path()
    with tempfile.TemporaryDirectory() as tmp:
        report = train_from_longmemeval(dataset, LocalMiniLMEmbedder(), Path(tmp) / "question_type.safetensors")
    results = {"command": "bench/question_type.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
               "dataset": dataset.name, "sha256": file_sha256(dataset), "questions": report.questions,
               "cv_accuracy_5_fold": round(report.accuracy, 4),
               "cv_accuracy_per_type": {k: round(v, 4) for k, v in report.per_type.items()}}
    (ROOT / "bench" / "results" / "question_type.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
