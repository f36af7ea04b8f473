-- Summaries of the pairs dreamed since the last pass (the dream session's own pairs excluded), oldest first.
SELECT p.id::text AS id, s.summary, p.occurred_at
FROM memory_pairs p
JOIN pair_stages s ON s.pair_id = p.id
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.session_id <> %(dream_session)s
  AND s.summary IS NOT NULL AND s.summary <> ''
  AND (%(since)s::timestamptz IS NULL OR s.extracted_at > %(since)s::timestamptz)
ORDER BY p.occurred_at, p.id
LIMIT %(limit)s;
