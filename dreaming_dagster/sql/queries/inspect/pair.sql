-- One pair of the user's graph with its stages' state and summary (NULL row: not this user's, or no such pair).
SELECT p.id::text AS pair_id, p.session_id, p.turn_index, p.occurred_at, p.ingested_at, p.user_message,
       p.assistant_message, p.token_count, p.metadata,
       (p.embedding IS NOT NULL) AS embedded, st.dated_at IS NOT NULL AS dated, st.keyed_at IS NOT NULL AS keyed,
       st.extracted_at IS NOT NULL AS extracted, st.kg_stored_at IS NOT NULL AS linked, st.summary,
       st.attempts AS extraction_attempts, st.last_error AS extraction_error
FROM memory_pairs p
LEFT JOIN pair_stages st ON st.pair_id = p.id
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.id = %(pair_id)s::uuid;
