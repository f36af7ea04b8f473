UPDATE subjects
SET description_text = %(description)s
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL;
