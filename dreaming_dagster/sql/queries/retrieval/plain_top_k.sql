-- The baseline the composite query is measured against (bench/recall.py): a plain pgvector top-K of
-- one user's pairs by cosine, nothing else.
SELECT id, embedding <=> %(query)s AS distance
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
ORDER BY embedding <=> %(query)s
LIMIT %(pool_size)s;
