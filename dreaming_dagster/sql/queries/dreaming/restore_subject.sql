-- Bring an archived subject back to the live graph, with the links it kept.
UPDATE subjects
SET archived_at = NULL, archive_reason = NULL, merged_into = NULL, superseded_by = NULL
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NOT NULL
RETURNING id::text AS id, subject_text;
