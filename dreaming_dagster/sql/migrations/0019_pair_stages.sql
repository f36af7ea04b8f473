-- Stage progress in its own narrow table (issue 18). A pair's dreaming checkpoints and the extraction's
-- output lived on memory_pairs, whose rows are wide (two messages, two vectors) and carry a dozen
-- indexes, two of them HNSW. The pending-work indexes name the checkpoint columns, so no checkpoint UPDATE
-- could be HOT: each one wrote a new version of the wide row and an entry in every index, an HNSW
-- insertion twice over (measured: ~1 ms a pair a checkpoint, three checkpoints a pair). Here a checkpoint
-- rewrites a row of ~100 bytes with five small B-trees; memory_pairs is written by saves and the
-- embedding stage only.
--
-- One row per pair, made by the insert trigger below in the pair's own statement (a pair never exists
-- without it), gone with the pair. user_id and kg_id are the pair's (they never change): every query
-- scopes by them here as on memory_pairs.

CREATE TABLE IF NOT EXISTS pair_stages (
    pair_id            uuid PRIMARY KEY REFERENCES memory_pairs (id) ON DELETE CASCADE,
    user_id            text NOT NULL,
    kg_id              text NOT NULL,
    summary            text,
    extracted_subjects jsonb,
    extracted_at       timestamptz,
    subjects_merged_at timestamptz,
    kg_stored_at       timestamptz,
    attempts           integer NOT NULL DEFAULT 0,
    last_error         text,
    last_attempt_at    timestamptz
);

INSERT INTO pair_stages (pair_id, user_id, kg_id, summary, extracted_subjects, extracted_at, subjects_merged_at,
                         kg_stored_at, attempts, last_error, last_attempt_at)
SELECT id, user_id, kg_id, summary, extracted_subjects, extracted_at, subjects_merged_at, kg_stored_at, attempts,
       last_error, last_attempt_at
FROM memory_pairs
ON CONFLICT (pair_id) DO NOTHING;

-- Per-user counts (stats, graph checks) and the three stages' pending work, as on memory_pairs before.
CREATE INDEX IF NOT EXISTS pair_stages_user_kg_idx ON pair_stages (user_id, kg_id);
CREATE INDEX IF NOT EXISTS pair_stages_pending_extraction_idx
    ON pair_stages (user_id, kg_id) WHERE extracted_at IS NULL;
CREATE INDEX IF NOT EXISTS pair_stages_pending_merge_idx
    ON pair_stages (user_id, kg_id) WHERE extracted_at IS NOT NULL AND subjects_merged_at IS NULL;
CREATE INDEX IF NOT EXISTS pair_stages_pending_link_idx
    ON pair_stages (user_id, kg_id) WHERE subjects_merged_at IS NOT NULL AND kg_stored_at IS NULL;

-- Every new pair gets its row in the same statement (COPY and INSERT … SELECT included). A statement that
-- writes a pair's row itself (a dream pair, born dreamed) keeps it: the trigger inserts only what is missing.
CREATE OR REPLACE FUNCTION pair_stages_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pair_stages (pair_id, user_id, kg_id)
    SELECT id, user_id, kg_id FROM inserted_pairs
    ORDER BY id
    ON CONFLICT (pair_id) DO NOTHING;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS memory_pairs_stages_insert ON memory_pairs;
CREATE TRIGGER memory_pairs_stages_insert
    AFTER INSERT ON memory_pairs
    REFERENCING NEW TABLE AS inserted_pairs
    FOR EACH STATEMENT EXECUTE FUNCTION pair_stages_on_insert();

DROP INDEX IF EXISTS memory_pairs_pending_extraction_idx;
DROP INDEX IF EXISTS memory_pairs_pending_merge_idx;
DROP INDEX IF EXISTS memory_pairs_pending_link_idx;
ALTER TABLE memory_pairs DROP COLUMN IF EXISTS summary,
                         DROP COLUMN IF EXISTS extracted_subjects,
                         DROP COLUMN IF EXISTS extracted_at,
                         DROP COLUMN IF EXISTS subjects_merged_at,
                         DROP COLUMN IF EXISTS kg_stored_at,
                         DROP COLUMN IF EXISTS attempts,
                         DROP COLUMN IF EXISTS last_error,
                         DROP COLUMN IF EXISTS last_attempt_at;
ANALYZE pair_stages;
