"""Where the ranker assets keep their artifacts (``<data_dir>/ranker/``): one file per product, so every
asset can be re-run alone and a person can open what it wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RankerWorkspace:
    root: Path

    def ensure(self) -> RankerWorkspace:
        self.root.mkdir(parents=True, exist_ok=True)
        return self

    @property
    def memory_manifest(self) -> Path:
        return self.root / "memory.json"

    @property
    def haystacks_manifest(self) -> Path:
        return self.root / "memory_s.json"

    @property
    def locomo_questions(self) -> Path:
        return self.root / "locomo_as_longmemeval.json"  # LoCoMo converted (training/locomo.py)

    @property
    def locomo_manifest(self) -> Path:
        return self.root / "memory_locomo.json"

    @property
    def realmem_questions(self) -> Path:
        return self.root / "realmem_as_longmemeval.json"  # RealMem converted (training/realmem.py)

    @property
    def realmem_manifest(self) -> Path:
        return self.root / "memory_realmem.json"

    @property
    def encoder_delta(self) -> Path:
        """The memory encoder's low-rank delta over MiniLM (encoder_delta.py), when it beat MiniLM on dev."""
        return self.root / "encoder_delta.safetensors"

    @property
    def pool_questions(self) -> Path:
        return self.root / "pools_questions.parquet"

    @property
    def pool_candidates(self) -> Path:
        return self.root / "pools_candidates.parquet"

    @property
    def training(self) -> Path:
        return self.root / "training.json"

    def model(self, version: str) -> Path:
        return self.root / f"ranker_{version}.safetensors"

    @property
    def evaluation_json(self) -> Path:
        return self.root / "evaluation.json"

    @property
    def evaluation_markdown(self) -> Path:
        return self.root / "evaluation.md"

    @property
    def curves_png(self) -> Path:
        return self.root / "training_curves.png"

    def require(self, path: Path, producer: str) -> Path:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: materialize {producer} first")
        return path
