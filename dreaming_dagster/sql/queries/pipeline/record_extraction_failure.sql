UPDATE pair_stages
SET attempts = attempts + 1, last_error = left(%(error)s, 2000), last_attempt_at = now()
WHERE pair_id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND extracted_at IS NULL;
