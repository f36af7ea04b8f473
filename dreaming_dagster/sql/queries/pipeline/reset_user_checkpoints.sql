-- Rebuild, step 2: reset every pair's graph checkpoints so the graph's stages run again from the stored
-- pairs. The dating stage's times depend on the pair alone, not on the graph: they stay.
UPDATE pair_stages
SET summary = NULL, extracted_subjects = NULL, extracted_at = NULL, subjects_merged_at = NULL,
    kg_stored_at = NULL, attempts = 0, last_error = NULL
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
