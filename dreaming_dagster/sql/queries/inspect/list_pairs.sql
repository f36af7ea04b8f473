-- A page of the user's pairs in one graph, oldest first, optionally of one session and within [since,
-- until); keyset-paged by (occurred_at, id) after the last row of the previous page (NULL: the first page).
-- Each pair with where dreaming is and the names of the subjects it is linked to.
SELECT p.id::text AS pair_id, p.session_id, p.turn_index, p.occurred_at, p.ingested_at, p.user_message,
       p.assistant_message, p.token_count, p.metadata,
       (p.embedding IS NOT NULL) AS embedded, st.dated_at IS NOT NULL AS dated,
       st.extracted_at IS NOT NULL AS extracted, st.kg_stored_at IS NOT NULL AS linked,
       coalesce((SELECT array_agg(s.subject_text ORDER BY s.link_count DESC, s.subject_text)
                 FROM subject_memory_pair_links l JOIN subjects s ON s.id = l.subject_id
                 WHERE l.pair_id = p.id), '{}') AS subjects
FROM memory_pairs p
LEFT JOIN pair_stages st ON st.pair_id = p.id
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
  AND (%(session_id)s::text IS NULL OR p.session_id = %(session_id)s::text)
  AND (%(since)s::timestamptz IS NULL OR p.occurred_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR p.occurred_at < %(until)s::timestamptz)
  AND (%(after_time)s::timestamptz IS NULL OR (p.occurred_at, p.id) > (%(after_time)s::timestamptz, %(after_id)s::uuid))
ORDER BY p.occurred_at, p.id
LIMIT %(limit)s;
