-- Summaries of the pairs dreamed since the last pass (the dream session's own pairs excluded), oldest first.
SELECT id::text AS id, summary, occurred_at
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND session_id <> %(dream_session)s
  AND summary IS NOT NULL AND summary <> ''
  AND (%(since)s::timestamptz IS NULL OR extracted_at > %(since)s::timestamptz)
ORDER BY occurred_at, id
LIMIT %(limit)s;
