-- Tokens saved since the last pass that belonged to forgotten pairs no longer count toward the next one.
UPDATE dreaming_state
SET tokens_since_last_pass = greatest(tokens_since_last_pass - %(tokens)s, 0)
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
