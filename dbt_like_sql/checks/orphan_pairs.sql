-- Pairs marked stored in the graph with no link although extraction found subjects.
SELECT count(*) AS orphans
FROM memory_pairs p
WHERE p.user_id = %(user_id)s AND p.kg_stored_at IS NOT NULL
  AND jsonb_array_length(coalesce(p.extracted_subjects, '[]'::jsonb)) > 0
  AND NOT EXISTS (SELECT 1 FROM subject_memory_pair_links l WHERE l.pair_id = p.id);
