"""Resources shared by every domain, each a slice of :class:`~dreaming_dagster.config.settings.DreamingSettings`.

Every setting is declared once, in the settings object. A resource's fields are generated from the
settings fields it owns (same type, same description, the resource's prefix dropped: ``embedding_model``
is ``EmbedderResource.model``), so a setting cannot be added to one and forgotten in the other. A field
left unset falls back to the settings (the same ``DREAMING_*`` environment the CLI reads), so Dagster and
the shell always agree; a value set in the launchpad or in code wins. Variables that are set are bound
with ``EnvVar``: the UI shows which variable configured a field, never a secret's value.
"""

from __future__ import annotations

import os
import types
import typing
from pathlib import Path

import dagster as dg
import pydantic
from pydantic import PrivateAttr

from dreaming_dagster.config.settings import ENV_PREFIX, DreamingSettings
from dreaming_dagster.embeddings import Embedder, embedder_from_settings
from dreaming_dagster.extraction.extractors import Extractor, extractor_from_settings
from dreaming_dagster.pipeline.refiners import Refiner, refiner_from_settings
from dreaming_dagster.storage.database import Database


def _config_type(annotation: object) -> object:
    """A settings field's type as Dagster config takes it (paths and choices are strings there)."""
    base = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        base = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return str if base is Path or typing.get_origin(base) is typing.Literal else base


class SettingsSlice(dg.ConfigurableResource):
    """Base of the generated resources: ``settings()`` is the environment's settings with this
    resource's set fields laid over them."""

    def overrides(self) -> dict:
        """The settings this resource sets, by their settings names."""
        prefix = type(self).settings_prefix
        return {f"{prefix}{name}": value for name, value in self.model_dump().items() if value is not None}

    def settings(self) -> DreamingSettings:
        return layered_settings(self)

    @classmethod
    def from_environment(cls) -> SettingsSlice:
        """Every string or integer field whose variable is set, bound to it with ``EnvVar`` (Dagster has
        no float or boolean EnvVar: those fields stay unset and the settings read the variable)."""
        bound = {}
        for name, field in cls.model_fields.items():
            variable = f"{ENV_PREFIX}{cls.settings_prefix}{name}".upper()
            if not os.environ.get(variable):
                continue
            if field.annotation == str | None:
                bound[name] = dg.EnvVar(variable)
            elif field.annotation == int | None:
                bound[name] = dg.EnvVar.int(variable)
        return cls(**bound)


def layered_settings(*slices: SettingsSlice) -> DreamingSettings:
    """The environment's settings with every given resource's set fields laid over them (a consolidation
    pass needs the LLM's and the policy's)."""
    overrides: dict = {}
    for resource in slices:
        overrides |= resource.overrides()
    return DreamingSettings(**overrides)


def settings_slice(name: str, doc: str, settings_names: typing.Iterable[str], prefix: str = "") -> type:
    """A resource class whose fields are ``settings_names`` (``prefix`` dropped), as optional values."""
    fields = {}
    for setting in settings_names:
        field = DreamingSettings.model_fields[setting]
        fields[setting.removeprefix(prefix)] = (typing.Optional[_config_type(field.annotation)],  # noqa: UP045
                                                pydantic.Field(default=None, description=field.description))
    resource = pydantic.create_model(name, __base__=SettingsSlice, __doc__=doc, __module__=__name__, **fields)
    resource.settings_prefix = prefix
    return resource


def _owned(prefix: str) -> list[str]:
    return [name for name in DreamingSettings.model_fields if name.startswith(prefix)]


_DATABASE_SETTINGS = ["database_url", "data_dir", "embedded_shared_buffers", "dagster_storage_url",
                      "dagster_max_user_partitions"]
_DatabaseSlice = settings_slice("_DatabaseSlice", "", _DATABASE_SETTINGS)
_EmbedderSlice = settings_slice("_EmbedderSlice", "", _owned("embedding_"), prefix="embedding_")
_LLMSlice = settings_slice("_LLMSlice", "", _owned("llm_"), prefix="llm_")
# Everything else is how dreaming behaves: merge threshold, consolidation budget and decay, recall. The
# serve_* settings belong to the HTTP service's own process (dreaming serve), which Dagster never runs.
_POLICY_SETTINGS = [name for name in DreamingSettings.model_fields
                    if name not in _DATABASE_SETTINGS and not name.startswith(("embedding_", "llm_", "serve_"))]
DreamingPolicyResource = settings_slice(
    "DreamingPolicyResource", "How dreaming behaves: the merge threshold, consolidation passes (token "
    "budget, decay) and recall (DREAMING_MERGE_THRESHOLD, DREAMING_DREAM_*, DREAMING_DECAY_*, …).",
    _POLICY_SETTINGS)


class DreamingDatabaseResource(_DatabaseSlice):
    """Postgres + pgvector holding every user's memory. Unset URL: the embedded pgserver."""

    _database: Database | None = PrivateAttr(default=None)

    def database(self) -> Database:
        """The database, with a pool of DREAMING_DATABASE_CONNECTIONS connections for the run (its stages
        would otherwise open one a statement batch: ~80 for a user's run), closed when the run ends."""
        if self._database is None:
            self._database = Database.from_settings(self.settings())
        return self._database

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._database is not None:
            self._database.close()


class LLMResource(_LLMSlice):
    """The chat model behind extraction, refinement and consolidation passes: an OpenAI-compatible
    endpoint, or the offline providers (DREAMING_LLM_*)."""

    def extractor(self) -> Extractor:
        return extractor_from_settings(self.settings())

    def refiner(self) -> Refiner:
        return refiner_from_settings(self.settings())


class EmbedderResource(_EmbedderSlice):
    """Embeddings for pairs and subjects: local all-MiniLM-L6-v2 or an OpenAI-compatible endpoint
    (DREAMING_EMBEDDING_*)."""

    def embedder(self) -> Embedder:
        return embedder_from_settings(self.settings())


def build_resources() -> dict[str, dg.ConfigurableResource]:
    return {"dreaming_db": DreamingDatabaseResource.from_environment(),
            "embedder": EmbedderResource.from_environment(),
            "llm": LLMResource.from_environment(),
            "dreaming_policy": DreamingPolicyResource.from_environment()}


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=build_resources())
