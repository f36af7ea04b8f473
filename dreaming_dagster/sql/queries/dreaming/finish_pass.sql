-- Close a pass in its own transaction: subtract exactly the tokens it consumed (saves made during the
-- pass stay counted) and remember it.
INSERT INTO dreaming_state AS ds (user_id, kg_id, tokens_since_last_pass, last_pass_at, last_pass_id, last_input_hash)
VALUES (%(user_id)s, %(kg_id)s, 0, now(), %(pass_id)s, %(input_hash)s)
ON CONFLICT (user_id, kg_id) DO UPDATE
SET tokens_since_last_pass = greatest(ds.tokens_since_last_pass - %(consumed)s, 0), last_pass_at = now(),
    last_pass_id = %(pass_id)s, last_input_hash = %(input_hash)s;
