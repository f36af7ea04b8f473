-- Users whose saved tokens since their last pass reached the threshold (token_budget_sensor).
SELECT user_id, kg_id, tokens_since_last_pass, last_pass_id::text AS last_pass_id
FROM dreaming_state
WHERE tokens_since_last_pass >= %(threshold)s
ORDER BY user_id, kg_id;
