-- The subjects one pair of the user's graph is linked to, most linked first.
SELECT s.id::text AS subject_id, s.subject_text AS name, s.subject_type AS type, s.link_count AS pairs,
       s.archived_at IS NOT NULL AS archived, s.hub_since IS NOT NULL AS hub
FROM subject_memory_pair_links l
JOIN subjects s ON s.id = l.subject_id
WHERE l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s AND l.pair_id = %(pair_id)s::uuid
ORDER BY s.link_count DESC, s.subject_text;
