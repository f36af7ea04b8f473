-- The dated events of one pair of the user's graph (the dating stage's and the LLM extraction's).
SELECT t.expression, t.first_day, t.last_day, t.granularity, t.certainty, t.source
FROM pair_times t
WHERE t.user_id = %(user_id)s AND t.kg_id = %(kg_id)s AND t.pair_id = %(pair_id)s::uuid
ORDER BY t.source, t.position;
