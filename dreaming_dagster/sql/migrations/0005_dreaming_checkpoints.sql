-- Stage checkpoints for the dreaming pipeline. Each stage selects the pairs whose previous checkpoint is
-- set and whose own is NULL: extracted_at → subjects_merged_at → kg_stored_at.
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS subjects_merged_at timestamptz;

CREATE INDEX IF NOT EXISTS memory_pairs_pending_merge_idx
    ON memory_pairs (user_id, kg_id) WHERE extracted_at IS NOT NULL AND subjects_merged_at IS NULL;
DROP INDEX IF EXISTS memory_pairs_pending_kg_store_idx;
CREATE INDEX IF NOT EXISTS memory_pairs_pending_link_idx
    ON memory_pairs (user_id, kg_id) WHERE subjects_merged_at IS NOT NULL AND kg_stored_at IS NULL;
-- Subjects whose description became a " | " junk drawer wait for refinement.
CREATE INDEX IF NOT EXISTS subjects_pending_refinement_idx
    ON subjects (user_id, kg_id) WHERE archived_at IS NULL AND description_text LIKE '% | %';
