-- Point a merge's sources' pairs at the target too. The sources keep their own links (an archived
-- subject can be restored with them); retrieval reads only live subjects.
INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id)
SELECT %(target)s, l.pair_id, l.user_id, l.kg_id
FROM subject_memory_pair_links l
WHERE l.subject_id = ANY(%(sources)s::uuid[]) AND l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s
ON CONFLICT DO NOTHING;
