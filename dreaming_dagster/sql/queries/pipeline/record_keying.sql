-- The keying stage's checkpoint for a batch, in the transaction that wrote its keys.
UPDATE pair_stages
SET keyed_at = now()
WHERE pair_id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND keyed_at IS NULL;
