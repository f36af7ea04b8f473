-- The dating stage's checkpoint for a batch, in the transaction that wrote its times.
UPDATE pair_stages
SET dated_at = now()
WHERE pair_id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND dated_at IS NULL;
