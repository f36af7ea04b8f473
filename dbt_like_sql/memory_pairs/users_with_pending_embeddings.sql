-- Users with pairs waiting for an embedding, with a fingerprint of that work (for sensor run keys).
-- Served by the partial index memory_pairs_pending_embedding_idx, so it stays cheap at any table size.
SELECT user_id,
       count(*)          AS pending,
       max(ingested_at)  AS newest_ingested_at
FROM memory_pairs
WHERE embedding IS NULL
GROUP BY user_id
ORDER BY user_id;
