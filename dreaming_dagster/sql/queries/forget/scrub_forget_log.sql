-- An erasure leaves no row naming the user: the audit rows of the user's earlier pair and session forgets
-- keep their counts and lose the user id, in one graph (a tenant's erasure) or in all (kg_id NULL).
UPDATE forget_log
SET user_id = NULL
WHERE user_id = %(user_id)s AND (%(kg_id)s::text IS NULL OR kg_id = %(kg_id)s::text);
