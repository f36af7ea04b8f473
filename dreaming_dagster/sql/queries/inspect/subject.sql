-- One subject of the user's graph (NULL row: not this user's, or no such subject).
SELECT s.id::text AS subject_id, s.subject_text AS name, s.subject_type AS type, s.description_text AS description,
       s.link_count AS pairs, s.importance, s.reinforcement_count, s.is_key_subject AS key_subject,
       s.hub_since IS NOT NULL AS hub, s.pinned, s.created_at, s.last_seen_at, s.refined_at, s.archived_at,
       s.archive_reason, s.merged_into::text AS merged_into, s.superseded_by::text AS superseded_by
FROM subjects s
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.id = %(subject_id)s::uuid;
