-- A new name, and the embedding of that name (merges compare names).
UPDATE subjects
SET subject_text = %(name)s, embedding = %(embedding)s
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL;
