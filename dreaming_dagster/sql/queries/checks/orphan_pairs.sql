-- Pairs of a user's graphs kg_ids marked stored in the graph with no link although extraction found subjects.
SELECT count(*) AS orphans
FROM pair_stages s
WHERE s.user_id = %(user_id)s AND s.kg_id = ANY(%(kg_ids)s::text[]) AND s.kg_stored_at IS NOT NULL
  AND jsonb_array_length(coalesce(s.extracted_subjects, '[]'::jsonb)) > 0
  AND NOT EXISTS (SELECT 1 FROM subject_memory_pair_links l WHERE l.pair_id = s.pair_id);
