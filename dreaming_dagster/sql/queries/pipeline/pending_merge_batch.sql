-- Stage 3 input: extracted pairs whose subjects are not merged into the graph yet, oldest first.
SELECT p.id, p.occurred_at, s.extracted_subjects
FROM pair_stages s
JOIN memory_pairs p ON p.id = s.pair_id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.extracted_at IS NOT NULL AND s.subjects_merged_at IS NULL
ORDER BY p.occurred_at, p.turn_index NULLS LAST, p.id
LIMIT %(limit)s;
