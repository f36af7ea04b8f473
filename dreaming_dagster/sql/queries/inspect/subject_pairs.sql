-- The pairs one subject of the user's graph is linked to, newest first.
SELECT p.id::text AS pair_id, p.session_id, p.turn_index, p.occurred_at, p.user_message, p.assistant_message
FROM subject_memory_pair_links l
JOIN memory_pairs p ON p.id = l.pair_id
WHERE l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s AND l.subject_id = %(subject_id)s::uuid
ORDER BY p.occurred_at DESC, p.id
LIMIT %(limit)s;
