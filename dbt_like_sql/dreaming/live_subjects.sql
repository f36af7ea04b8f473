-- The user's live graph as a consolidation pass sees it: every live subject with its link count.
SELECT s.id::text AS id, s.subject_text, s.description_text, s.subject_type, s.embedding, s.importance,
       s.reinforcement_count, s.pinned, s.created_at, s.last_seen_at, s.updated_at,
       (SELECT count(*) FROM subject_memory_pair_links l WHERE l.subject_id = s.id) AS link_count
FROM subjects s
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
ORDER BY s.created_at, s.id;
