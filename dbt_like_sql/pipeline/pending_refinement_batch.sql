-- Stage 5 input: live subjects whose description became a " | " junk drawer, as listed by
-- subject_refinement_queue (migration 0022 keeps it equal to that predicate; checked here again).
SELECT s.id, s.subject_text, s.description_text, s.embedding IS NOT NULL AS has_vector
FROM subject_refinement_queue q
JOIN subjects s ON s.id = q.subject_id
WHERE q.user_id = %(user_id)s AND q.kg_id = %(kg_id)s
  AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.archived_at IS NULL AND s.description_text LIKE '%% | %%'
  AND NOT (s.id = ANY(%(skip_ids)s::uuid[]))  -- failed earlier in this run
ORDER BY s.reinforcement_count DESC, s.id
LIMIT %(limit)s;
