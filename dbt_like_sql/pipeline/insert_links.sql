-- Link a pair to its subjects; only subjects of the same user and graph can be linked (tenancy guard).
-- Retries are no-ops thanks to the composite primary key.
INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id)
SELECT s.id, %(pair_id)s, s.user_id, s.kg_id
FROM subjects s
WHERE s.id = ANY(%(subject_ids)s::uuid[]) AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
ON CONFLICT DO NOTHING;
