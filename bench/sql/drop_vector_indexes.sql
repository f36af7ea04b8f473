-- Benchmark setup: bulk loads skip incremental HNSW inserts; create_vector_indexes rebuilds them after.
DROP INDEX IF EXISTS memory_pairs_embedding_hnsw_idx;
DROP INDEX IF EXISTS memory_pairs_reply_embedding_hnsw_idx;
DROP INDEX IF EXISTS subjects_embedding_hnsw_idx;
DROP INDEX IF EXISTS memory_keys_embedding_idx;
