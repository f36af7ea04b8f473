-- bench/lexical.py: each pair's english tsvector, computed once, with a GIN index (the measured queries
-- would otherwise re-parse every pair's text for each question).
CREATE TABLE IF NOT EXISTS bench_pair_documents AS
SELECT p.user_id, p.session_id, p.turn_index, p.id, p.content_hash,
       to_tsvector('english', p.user_message || ' ' || p.assistant_message) AS document
FROM memory_pairs p;
CREATE INDEX IF NOT EXISTS bench_pair_documents_gin ON bench_pair_documents USING gin (document);
ANALYZE bench_pair_documents;
