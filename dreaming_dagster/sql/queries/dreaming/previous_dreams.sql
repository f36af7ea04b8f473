-- What the dreamer remembers of its previous passes: the pairs of the reserved dream session, newest first.
SELECT id::text AS id, assistant_message AS summary, occurred_at
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND session_id = %(dream_session)s
ORDER BY occurred_at DESC
LIMIT %(limit)s;
