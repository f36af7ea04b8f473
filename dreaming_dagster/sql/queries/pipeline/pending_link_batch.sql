-- Stage 4 input: merged pairs not yet linked into the graph.
SELECT p.id, s.extracted_subjects
FROM pair_stages s
JOIN memory_pairs p ON p.id = s.pair_id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.subjects_merged_at IS NOT NULL AND s.kg_stored_at IS NULL
ORDER BY p.occurred_at, p.id
LIMIT %(limit)s;
