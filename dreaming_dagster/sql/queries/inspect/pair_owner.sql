-- Whose pair this is in one tenant's graph (no row: the tenant holds no such pair).
SELECT user_id FROM memory_pairs WHERE id = %(pair_id)s::uuid AND kg_id = %(kg_id)s;
