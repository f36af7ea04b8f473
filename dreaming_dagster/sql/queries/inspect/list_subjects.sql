-- The user's subjects in one graph, most linked first, optionally whose name contains a search text
-- (case-insensitive) and with the archived ones.
SELECT s.id::text AS subject_id, s.subject_text AS name, s.subject_type AS type, s.description_text AS description,
       s.link_count AS pairs, s.importance, s.reinforcement_count, s.is_key_subject AS key_subject,
       s.hub_since IS NOT NULL AS hub, s.pinned, s.archived_at, s.archive_reason, s.last_seen_at
FROM subjects s
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND (%(include_archived)s OR s.archived_at IS NULL)
  AND (%(search)s::text IS NULL OR strpos(lower(s.subject_text), lower(%(search)s::text)) > 0)
ORDER BY s.link_count DESC, s.subject_text, s.id
LIMIT %(limit)s OFFSET %(offset)s;
