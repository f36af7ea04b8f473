-- The pairs a forget request names, in the user's graph only: by id (pair_ids), by session (session_id),
-- or both NULL for every pair of the graph. Locked, so a concurrent forget of the same pairs waits.
SELECT id, token_count, ingested_at
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
  AND (%(pair_ids)s::uuid[] IS NULL OR id = ANY (%(pair_ids)s::uuid[]))
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s::text)
ORDER BY id
FOR UPDATE;
