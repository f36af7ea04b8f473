"""Resources shared by every domain: the dreaming database and the embedder.

Each field left unset falls back to :class:`~dreaming_dagster.settings.DreamingSettings` (the same
``DREAMING_*`` environment the CLI reads), so Dagster and the shell always agree. Variables that are set
are bound with ``EnvVar``: the UI shows which variable configured a field, never a secret's value.
"""

from __future__ import annotations

import os

import dagster as dg
from pydantic import PrivateAttr

from dreaming_dagster.embeddings import Embedder, embedder_from_settings
from dreaming_dagster.extraction.providers import Extractor
from dreaming_dagster.llm.factory import extractor_from_settings, refiner_from_settings
from dreaming_dagster.refinement import Refiner
from dreaming_dagster.settings import DreamingSettings
from dreaming_dagster.storage.database import Database


def _overlay(fields: dict) -> DreamingSettings:
    return DreamingSettings(**{name: value for name, value in fields.items() if value is not None})


class DreamingDatabaseResource(dg.ConfigurableResource):
    """Postgres + pgvector holding every user's memory. Unset URL: the embedded pgserver."""

    database_url: str | None = None
    data_dir: str | None = None

    _database: Database | None = PrivateAttr(default=None)

    def settings(self) -> DreamingSettings:
        return _overlay({"database_url": self.database_url, "data_dir": self.data_dir})

    def database(self) -> Database:
        if self._database is None:
            self._database = Database.from_settings(self.settings())
        return self._database


class EmbedderResource(dg.ConfigurableResource):
    """Embeddings for pairs and subjects: local all-MiniLM-L6-v2 or an OpenAI-compatible endpoint."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    dimensions: int | None = None
    batch_size: int | None = None

    def settings(self) -> DreamingSettings:
        return _overlay({"embedding_provider": self.provider, "embedding_model": self.model,
                         "embedding_base_url": self.base_url, "embedding_api_key": self.api_key,
                         "embedding_dimensions": self.dimensions, "embedding_batch_size": self.batch_size})

    def embedder(self) -> Embedder:
        return embedder_from_settings(self.settings())


class LLMResource(dg.ConfigurableResource):
    """The chat model behind extraction and refinement: an OpenAI-compatible endpoint, or offline."""

    provider: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    fallback_model: str | None = None

    def settings(self) -> DreamingSettings:
        return _overlay({"llm_provider": self.provider, "llm_base_url": self.base_url,
                         "llm_api_key": self.api_key, "llm_model": self.model,
                         "llm_fallback_model": self.fallback_model})

    def extractor(self) -> Extractor:
        return extractor_from_settings(self.settings())

    def refiner(self) -> Refiner:
        return refiner_from_settings(self.settings())


def _env(name: str, *, as_int: bool = False):
    if not os.environ.get(name):
        return None
    return dg.EnvVar.int(name) if as_int else dg.EnvVar(name)


def build_resources() -> dict[str, dg.ConfigurableResource]:
    return {
        "dreaming_db": DreamingDatabaseResource(
            database_url=_env("DREAMING_DATABASE_URL"), data_dir=_env("DREAMING_DATA_DIR")),
        "embedder": EmbedderResource(
            provider=_env("DREAMING_EMBEDDING_PROVIDER"), model=_env("DREAMING_EMBEDDING_MODEL"),
            base_url=_env("DREAMING_EMBEDDING_BASE_URL"), api_key=_env("DREAMING_EMBEDDING_API_KEY"),
            dimensions=_env("DREAMING_EMBEDDING_DIMENSIONS", as_int=True),
            batch_size=_env("DREAMING_EMBEDDING_BATCH_SIZE", as_int=True)),
        "llm": LLMResource(
            provider=_env("DREAMING_LLM_PROVIDER"), base_url=_env("DREAMING_LLM_BASE_URL"),
            api_key=_env("DREAMING_LLM_API_KEY"), model=_env("DREAMING_LLM_MODEL"),
            fallback_model=_env("DREAMING_LLM_FALLBACK_MODEL")),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=build_resources())
