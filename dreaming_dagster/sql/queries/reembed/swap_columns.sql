-- Replace the old vectors with the re-embedded ones and rebuild the HNSW indexes and the pending-work
-- indexes (dropping a column drops every index that mentions it, partial ones included).
DROP INDEX IF EXISTS memory_pairs_embedding_hnsw_idx;
DROP INDEX IF EXISTS memory_pairs_reply_embedding_hnsw_idx;
DROP INDEX IF EXISTS memory_pairs_pending_reply_embedding_idx;
DROP INDEX IF EXISTS subjects_embedding_hnsw_idx;
DROP INDEX IF EXISTS memory_keys_embedding_idx;
ALTER TABLE memory_pairs DROP COLUMN embedding;
ALTER TABLE memory_pairs RENAME COLUMN embedding_next TO embedding;
ALTER TABLE memory_pairs DROP COLUMN reply_embedding;
ALTER TABLE memory_pairs RENAME COLUMN reply_embedding_next TO reply_embedding;
ALTER TABLE subjects DROP COLUMN embedding;
ALTER TABLE subjects RENAME COLUMN embedding_next TO embedding;
ALTER TABLE memory_keys DROP COLUMN embedding;
ALTER TABLE memory_keys RENAME COLUMN embedding_next TO embedding;
CREATE INDEX memory_pairs_embedding_hnsw_idx ON memory_pairs USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memory_pairs_reply_embedding_hnsw_idx ON memory_pairs USING hnsw (reply_embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS memory_pairs_pending_embedding_idx ON memory_pairs (user_id, kg_id) WHERE embedding IS NULL;
CREATE INDEX memory_pairs_pending_reply_embedding_idx ON memory_pairs (user_id, kg_id)
    WHERE reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> '';
CREATE INDEX subjects_embedding_hnsw_idx ON subjects USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memory_keys_embedding_idx ON memory_keys USING hnsw (embedding vector_cosine_ops);
