-- Stage 5 input: live subjects whose description became a " | " junk drawer.
SELECT id, subject_text, description_text
FROM subjects
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
  AND archived_at IS NULL AND description_text LIKE '%% | %%'
  AND NOT (id = ANY(%(skip_ids)s::uuid[]))  -- failed earlier in this run
ORDER BY reinforcement_count DESC, id
LIMIT %(limit)s;
