-- The user's live graph as a consolidation pass sees it: every live subject with its linked pairs (the
-- offline rules merge a name into a longer one only when the two share pairs).
SELECT s.id::text AS id, s.subject_text, s.description_text, s.subject_type, s.embedding, s.importance,
       s.reinforcement_count, s.pinned, s.created_at, s.last_seen_at, s.updated_at,
       cardinality(linked.pair_ids) AS link_count, linked.pair_ids
FROM subjects s
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(l.pair_id::text ORDER BY l.pair_id), '{}') AS pair_ids
    FROM subject_memory_pair_links l
    WHERE l.subject_id = s.id
) AS linked
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
ORDER BY s.created_at, s.id;
