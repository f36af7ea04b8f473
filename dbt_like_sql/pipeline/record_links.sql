-- A batch's pairs are linked into the graph.
UPDATE memory_pairs SET kg_stored_at = now() WHERE id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s;
