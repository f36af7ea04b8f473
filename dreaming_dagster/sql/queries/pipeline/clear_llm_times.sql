-- An extraction's times replace what an earlier extraction of the same pairs reported (a rebuild).
DELETE FROM pair_times
WHERE pair_id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND source = 'llm';
