-- `dreaming retry-failed`: parked pairs (extraction failed max_attempts times) get a fresh budget of
-- attempts, so the next run extracts them without waiting for the cool-down. Nothing else changes.
UPDATE pair_stages
SET attempts = 0, last_attempt_at = NULL
WHERE user_id = %(user_id)s AND (%(kg_id)s::text IS NULL OR kg_id = %(kg_id)s::text)
  AND extracted_at IS NULL AND attempts >= %(max_attempts)s
RETURNING pair_id AS id;
