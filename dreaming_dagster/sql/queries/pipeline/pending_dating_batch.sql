-- Dating stage input: pairs not yet dated, oldest first, with what the dating reads (the user's turn and
-- when it was said). Progress is pair_stages.dated_at (migration 0026).
SELECT p.id, p.user_message, p.occurred_at
FROM pair_stages s
JOIN memory_pairs p ON p.id = s.pair_id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.dated_at IS NULL
ORDER BY p.occurred_at, p.turn_index NULLS LAST, p.id
LIMIT %(limit)s;
