-- Stage 4 input: merged pairs not yet linked into the graph.
SELECT id, extracted_subjects
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
  AND subjects_merged_at IS NOT NULL AND kg_stored_at IS NULL
ORDER BY occurred_at, id
LIMIT %(limit)s;
