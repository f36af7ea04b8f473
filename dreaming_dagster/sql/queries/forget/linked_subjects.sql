-- The subjects linked to the pairs about to be forgotten (each once): after the delete, those left without a
-- link go, the rest have their descriptions rebuilt.
SELECT DISTINCT s.id
FROM subject_memory_pair_links l
JOIN subjects s ON s.id = l.subject_id
WHERE l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s AND l.pair_id = ANY (%(pair_ids)s::uuid[])
ORDER BY s.id;
