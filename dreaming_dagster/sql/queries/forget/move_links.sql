-- A subject renamed back onto a name another live subject holds joins it: its pairs link to the holder.
INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id)
SELECT m.holder, l.pair_id, l.user_id, l.kg_id
FROM unnest(%(subject_ids)s::uuid[], %(holder_ids)s::uuid[]) AS m (subject, holder)
JOIN subject_memory_pair_links l ON l.subject_id = m.subject
WHERE l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s
ON CONFLICT DO NOTHING;
