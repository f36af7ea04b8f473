-- Every subject of the user's graph for an export (archived ones too: the graph as consolidation left it).
SELECT s.id::text AS subject_id, s.subject_text AS name, s.subject_type AS type, s.description_text AS description,
       s.importance, s.reinforcement_count, s.pinned, s.is_key_subject AS key_subject, s.created_at, s.last_seen_at,
       s.refined_at, s.hub_since, s.archived_at, s.archive_reason, s.merged_into::text AS merged_into,
       s.superseded_by::text AS superseded_by
FROM subjects s
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
ORDER BY s.created_at, s.id;
