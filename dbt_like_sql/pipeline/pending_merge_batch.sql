-- Stage 3 input: extracted pairs whose subjects are not merged into the graph yet, oldest first.
SELECT id, occurred_at, extracted_subjects
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
  AND extracted_at IS NOT NULL AND subjects_merged_at IS NULL
ORDER BY occurred_at, turn_index NULLS LAST, id
LIMIT %(limit)s;
