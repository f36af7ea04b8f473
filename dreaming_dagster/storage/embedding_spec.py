"""What a vector column holds; the storage layer records it, embedding providers declare it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddingSpec:
    """What a vector column holds: the model that wrote it and its dimension. Recorded per database."""

    model: str
    dimension: int

    def __str__(self) -> str:
        return f"{self.model} ({self.dimension}-d)"
