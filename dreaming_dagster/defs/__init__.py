"""Dagster definitions, one domain per folder (loaded by ``dreaming_dagster.definitions``)."""
