-- Every pair of the user's graph for an export, oldest first, with what dreaming made of it: the
-- extraction's summary and subjects, the dated events, its index keys, and the subjects it is linked to.
SELECT p.id::text AS pair_id, p.session_id, p.turn_index, p.occurred_at, p.user_message, p.assistant_message,
       p.metadata, st.summary, st.extracted_subjects, st.extracted_at IS NOT NULL AS extracted,
       st.kg_stored_at IS NOT NULL AS linked, st.dated_at IS NOT NULL AS dated, st.keyed_at IS NOT NULL AS keyed,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                        'source', t.source, 'position', t.position, 'expression', t.expression,
                        'first_day', t.first_day, 'last_day', t.last_day, 'granularity', t.granularity,
                        'certainty', t.certainty) ORDER BY t.source, t.position)
                 FROM pair_times t WHERE t.pair_id = p.id), '[]'::jsonb) AS times,
       coalesce((SELECT jsonb_agg(jsonb_build_object('kind', k.kind, 'position', k.position, 'text', k.key_text)
                                  ORDER BY k.kind, k.position)
                 FROM memory_keys k WHERE k.pair_id = p.id), '[]'::jsonb) AS keys,
       coalesce((SELECT array_agg(l.subject_id::text ORDER BY l.subject_id)
                 FROM subject_memory_pair_links l WHERE l.pair_id = p.id), '{}') AS subject_ids
FROM memory_pairs p
LEFT JOIN pair_stages st ON st.pair_id = p.id
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
ORDER BY p.occurred_at, p.id;
