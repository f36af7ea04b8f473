-- The names of one user's live subjects in the graphs kg_ids.
SELECT kg_id, subject_text FROM subjects WHERE user_id = %(user_id)s AND kg_id = ANY(%(kg_ids)s::text[]) AND archived_at IS NULL;
