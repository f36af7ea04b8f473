-- Benchmark setup: the HNSW indexes of migrations 0002/0003/0009/0030, rebuilt after a bulk load (same definitions).
CREATE INDEX IF NOT EXISTS memory_pairs_embedding_hnsw_idx ON memory_pairs USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS memory_pairs_reply_embedding_hnsw_idx ON memory_pairs USING hnsw (reply_embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS subjects_embedding_hnsw_idx ON subjects USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS memory_keys_embedding_idx ON memory_keys USING hnsw (embedding vector_cosine_ops);
