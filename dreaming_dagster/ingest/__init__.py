"""Ingestion: validation, readers, persistence (stage 1) and deferred embedding."""
