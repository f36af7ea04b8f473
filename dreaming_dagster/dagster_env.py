"""The environment under which Dagster (UI, daemon, demo runs) uses the project's dagster.yaml."""

from __future__ import annotations

import os
from pathlib import Path

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.storage import embedded

STORAGE_URL_VARIABLE = "DREAMING_DAGSTER_STORAGE_URL"


def project_root() -> Path:
    """The folder holding dagster.yaml: the working directory if it has one, else the source checkout."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (candidate / "dagster.yaml").is_file():
            return candidate
    raise FileNotFoundError("dagster.yaml not found; run from the project root")


def dagster_storage_url(settings: DreamingSettings) -> str:
    """Explicit DREAMING_DAGSTER_STORAGE_URL, else the dreaming database's server (psycopg2 scheme)."""
    if settings.dagster_storage_url:
        return settings.dagster_storage_url
    if settings.database_url:
        scheme, separator, rest = settings.database_url.partition("://")
        if not separator or scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
            raise ValueError(f"cannot derive Dagster's storage URL from DREAMING_DATABASE_URL (not a "
                             f"postgresql:// URL); set {STORAGE_URL_VARIABLE}=postgresql+psycopg2://…")
        return f"postgresql+psycopg2://{rest}"
    return embedded.dagster_storage_url(settings.pgdata_dir, shared_buffers=settings.embedded_shared_buffers)


def configure_dagster_environment(settings: DreamingSettings) -> dict[str, str]:
    """Set DAGSTER_HOME and the storage URL in this process (children inherit them); return them."""
    values = {"DAGSTER_HOME": str(project_root()), STORAGE_URL_VARIABLE: dagster_storage_url(settings)}
    os.environ.update(values)
    return values
