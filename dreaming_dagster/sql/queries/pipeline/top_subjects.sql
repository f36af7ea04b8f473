-- A user's subjects ranked by how many pairs link to them.
SELECT s.subject_text, s.subject_type, s.reinforcement_count, count(l.pair_id) AS linked_pairs,
       s.refined_at IS NOT NULL AS refined, s.hub_since IS NOT NULL AS hub
FROM subjects s
LEFT JOIN subject_memory_pair_links l ON l.subject_id = s.id
WHERE s.user_id = %(user_id)s AND s.archived_at IS NULL
GROUP BY s.id
ORDER BY linked_pairs DESC, s.subject_text
LIMIT %(limit)s;
