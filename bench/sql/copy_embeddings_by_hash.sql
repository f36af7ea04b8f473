-- Benchmark setup: give an imported copy of a user the source's vectors (matched by content hash) instead of
-- embedding its pairs again.
UPDATE memory_pairs t
SET embedding = s.embedding, reply_embedding = s.reply_embedding
FROM memory_pairs s
WHERE t.user_id = %(target)s AND s.user_id = %(source)s AND s.kg_id = t.kg_id AND s.content_hash = t.content_hash;
