-- Keying stage input: pairs embedded and dated but not yet keyed, oldest first, with the user's turn and the
-- times the dating stage resolved in it (character offset and day range). Progress is pair_stages.keyed_at
-- (migration 0030).
SELECT p.id, p.user_message,
       coalesce((SELECT jsonb_agg(jsonb_build_object('position', t.position, 'first_day', t.first_day,
                                                     'last_day', t.last_day, 'granularity', t.granularity,
                                                     'certainty', t.certainty) ORDER BY t.position)
                 FROM pair_times t
                 WHERE t.pair_id = p.id AND t.user_id = %(user_id)s AND t.kg_id = %(kg_id)s AND t.source = 'text'),
                '[]'::jsonb) AS times
FROM pair_stages s
JOIN memory_pairs p ON p.id = s.pair_id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.keyed_at IS NULL AND s.dated_at IS NOT NULL
  AND p.embedding IS NOT NULL
ORDER BY p.occurred_at, p.turn_index NULLS LAST, p.id
LIMIT %(limit)s;
