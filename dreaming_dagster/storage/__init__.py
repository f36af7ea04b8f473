"""Postgres + pgvector storage: the embedded server, connections, migrations, what a vector column holds."""
