-- Rebuild, step 1: forget a user's subjects in one knowledge graph (their links cascade).
DELETE FROM subjects WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
