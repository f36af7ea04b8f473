-- pgvector provides the vector type, the cosine operator <=> and HNSW indexes.
-- IF NOT EXISTS lets a non-superuser run migrations once an administrator has installed the extension.
CREATE EXTENSION IF NOT EXISTS vector;
