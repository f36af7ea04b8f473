-- A batch's pairs are linked into the graph.
UPDATE pair_stages SET kg_stored_at = now() WHERE pair_id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s
  AND kg_id = %(kg_id)s;
