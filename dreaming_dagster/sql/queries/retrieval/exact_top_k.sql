-- The exact top-K of one user's pairs by the better of their two vectors, as composite_ranking's vector
-- pool defines it (no index: MATERIALIZED forces a full scan of the user's rows), to measure how much of
-- it the HNSW search finds (bench/recall.py, tests).
WITH mine AS MATERIALIZED (
    SELECT id, least(embedding <=> %(query)s, reply_embedding <=> %(query)s) AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
)
SELECT id, distance FROM mine ORDER BY distance, id LIMIT %(pool_size)s;
