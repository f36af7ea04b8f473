-- The janitor: pairs marked stored with zero links although their extraction had subjects. Their
-- merge and link checkpoints are reset so the stages run them again.
UPDATE pair_stages s
SET subjects_merged_at = NULL, kg_stored_at = NULL
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.kg_stored_at IS NOT NULL
  AND jsonb_array_length(coalesce(s.extracted_subjects, '[]'::jsonb)) > 0
  AND NOT EXISTS (SELECT 1 FROM subject_memory_pair_links l WHERE l.pair_id = s.pair_id)
RETURNING s.pair_id AS id;
