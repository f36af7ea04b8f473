-- Users whose saved tokens since their last pass reached the threshold (token_budget_sensor); not the
-- ranker's training memory (its own graph, %(training_kg)s).
SELECT user_id, kg_id, tokens_since_last_pass, last_pass_id::text AS last_pass_id
FROM dreaming_state
WHERE tokens_since_last_pass >= %(threshold)s AND kg_id <> %(training_kg)s
ORDER BY user_id, kg_id;
