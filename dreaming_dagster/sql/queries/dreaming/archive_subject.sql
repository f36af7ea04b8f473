-- Take a subject out of the live graph (never deleted): why, and what merged or superseded it.
UPDATE subjects
SET archived_at = now(), archive_reason = %(reason)s, merged_into = %(merged_into)s, superseded_by = %(superseded_by)s
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL;
