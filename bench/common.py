"""What every benchmark shares. Importing it first puts the project on the import path (benchmarks run as
`python bench/<name>.py` from a checkout, without installing anything more)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from dreaming_dagster.demo import default_dataset_path  # noqa: E402  (needs the path above)

# The LongMemEval oracle file (DREAMING_LONGMEMEVAL_PATH, else ../shared/data/longmemeval/).
ORACLE = default_dataset_path()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def machine() -> dict:
    """What a result was measured on."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
