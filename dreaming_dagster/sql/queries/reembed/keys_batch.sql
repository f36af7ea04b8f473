-- Index keys still to re-embed: those with a vector of their own (an event repeating a statement has none,
-- and keeps none).
SELECT pair_id, kind, position, key_text
FROM memory_keys
WHERE embedding IS NOT NULL AND embedding_next IS NULL
ORDER BY pair_id, kind, position
LIMIT %(limit)s;
