-- A user's consolidation state (no row: never saved a token, never dreamed).
SELECT tokens_since_last_pass, last_pass_at, last_pass_id, last_input_hash
FROM dreaming_state
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
