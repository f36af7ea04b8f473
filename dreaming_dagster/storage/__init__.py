"""Postgres + pgvector storage: the embedded server, connections, migrations, re-embedding."""
