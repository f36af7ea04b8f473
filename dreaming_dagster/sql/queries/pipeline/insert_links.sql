-- Link a batch's pairs to their subjects in one statement (a pair id and a subject id per link); only
-- subjects of the same user and graph can be linked (tenancy guard). Retries are no-ops thanks to the
-- composite primary key.
INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id)
SELECT s.id, l.pair_id, s.user_id, s.kg_id
FROM unnest(%(pair_ids)s::uuid[], %(subject_ids)s::uuid[]) AS l(pair_id, subject_id)
JOIN subjects s ON s.id = l.subject_id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
ON CONFLICT DO NOTHING;
