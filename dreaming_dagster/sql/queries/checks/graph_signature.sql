-- A user's graph as comparable data: each subject's name with the content hashes of its linked pairs.
-- Two runs over the same data (interrupted and resumed, or rebuilt) must give the same set.
SELECT s.subject_text, array_agg(p.content_hash ORDER BY p.content_hash) AS pairs
FROM subjects s
JOIN subject_memory_pair_links l ON l.subject_id = s.id
JOIN memory_pairs p ON p.id = l.pair_id
WHERE s.user_id = %(user_id)s
GROUP BY s.id, s.subject_text;
