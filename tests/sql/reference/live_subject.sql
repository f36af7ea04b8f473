-- The one-at-a-time merge (tests/merge_reference.py). A subject by id, only if it is live and belongs to this user and graph.
SELECT id, description_text FROM subjects
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL;
