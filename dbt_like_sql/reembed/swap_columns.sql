-- Replace the old vectors with the re-embedded ones and rebuild the HNSW indexes.
DROP INDEX IF EXISTS memory_pairs_embedding_hnsw_idx;
DROP INDEX IF EXISTS subjects_embedding_hnsw_idx;
ALTER TABLE memory_pairs DROP COLUMN embedding;
ALTER TABLE memory_pairs RENAME COLUMN embedding_next TO embedding;
ALTER TABLE subjects DROP COLUMN embedding;
ALTER TABLE subjects RENAME COLUMN embedding_next TO embedding;
CREATE INDEX memory_pairs_embedding_hnsw_idx ON memory_pairs USING hnsw (embedding vector_cosine_ops);
CREATE INDEX subjects_embedding_hnsw_idx ON subjects USING hnsw (embedding vector_cosine_ops);
