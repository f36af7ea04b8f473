-- Count newly saved tokens toward the next consolidation pass, in the saving transaction.
INSERT INTO dreaming_state (user_id, kg_id, tokens_since_last_pass)
VALUES (%(user_id)s, %(kg_id)s, %(tokens)s)
ON CONFLICT (user_id, kg_id)
DO UPDATE SET tokens_since_last_pass = dreaming_state.tokens_since_last_pass + EXCLUDED.tokens_since_last_pass;
