-- Benchmark and test probe: the vector pool's exact path on its own (retrieval/composite_ranking, CTE
-- exact): every one of a user's vectors read and compared, the better of a pair's two distances kept.
SELECT id, least(embedding <=> %(query)s, reply_embedding <=> %(query)s) AS distance
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
