-- The names of one user's live subjects, per knowledge graph.
SELECT kg_id, subject_text FROM subjects WHERE user_id = %(user_id)s AND archived_at IS NULL;
