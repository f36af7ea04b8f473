-- Subject updates that change neither the name nor the vector rewrite no index (issue 18: one new pair
-- through every stage touches only what that pair needs). Merging a pair into known subjects appends to
-- their descriptions, marks them key subjects and moves last_seen_at; none of it changes what an index
-- holds, yet every such UPDATE was non-HOT: subjects.updated_at is indexed (the profile's centroid age)
-- and moved on every update, and the pending-refinement index's predicate names description_text. So each
-- one wrote a new version of a ~1.9 kB row elsewhere and an entry in all seven indexes, an HNSW insertion
-- among them (~700 buffers, ~2 ms on a 5,000-pair user; measured 0 HOT updates of 9,034). Here:
--
-- * The centroid's age reads vector_changed_at, which moves only when a subject's vector or liveness
--   changes (the mean of the live vectors is all it describes); updated_at stays, unindexed.
-- * Subjects waiting for refinement are listed in subject_refinement_queue, kept by statement triggers,
--   instead of a partial index on subjects.
-- * A page keeps a quarter free (fillfactor 75), so an updated version fits beside the old one and Postgres
--   prunes the old version when it next reads the page: the table stops growing by a row a write.
--
-- And two reads the fast path made over all of a user's subjects now use an index: the extractor's "names
-- the memory already holds" (lower(name)) and the current hubs (rare, so the partial index is tiny).

ALTER TABLE subjects SET (fillfactor = 75);

-- Rows stored before this migration read '-infinity' (no rewrite); every profile's centroid is recomputed
-- on its next refresh, so none is judged against those.
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS vector_changed_at timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE subjects ALTER COLUMN vector_changed_at SET DEFAULT now();
UPDATE recall_profiles SET centroid_at = NULL WHERE centroid_at IS NOT NULL;

CREATE OR REPLACE FUNCTION subjects_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.embedding IS DISTINCT FROM OLD.embedding OR NEW.archived_at IS DISTINCT FROM OLD.archived_at THEN
        NEW.vector_changed_at := now();
    END IF;
    -- Decay alone is not a change worth a new pass.
    IF NEW.importance IS DISTINCT FROM OLD.importance AND NEW.decayed_through IS DISTINCT FROM OLD.decayed_through
       AND ROW(NEW.subject_text, NEW.description_text, NEW.archived_at, NEW.last_seen_at)
           IS NOT DISTINCT FROM ROW(OLD.subject_text, OLD.description_text, OLD.archived_at, OLD.last_seen_at) THEN
        RETURN NEW;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
CREATE INDEX IF NOT EXISTS subjects_user_kg_vector_changed_idx ON subjects (user_id, kg_id, vector_changed_at);
DROP INDEX IF EXISTS subjects_user_kg_updated_idx;

-- A live subject whose description became a " | " junk drawer waits here for refinement (stage 5). The
-- triggers below keep the queue equal to that predicate for every statement that writes subjects (the
-- stages, dream passes, restores, bulk copies); a deleted subject leaves it by the foreign key.
CREATE TABLE IF NOT EXISTS subject_refinement_queue (
    subject_id uuid PRIMARY KEY REFERENCES subjects (id) ON DELETE CASCADE,
    user_id    text NOT NULL,
    kg_id      text NOT NULL
);
CREATE INDEX IF NOT EXISTS subject_refinement_queue_user_kg_idx ON subject_refinement_queue (user_id, kg_id);

CREATE OR REPLACE FUNCTION subject_refinement_queue_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM subject_refinement_queue q
    USING written_subjects s
    WHERE q.subject_id = s.id AND NOT (s.archived_at IS NULL AND s.description_text LIKE '% | %');
    INSERT INTO subject_refinement_queue (subject_id, user_id, kg_id)
    SELECT s.id, s.user_id, s.kg_id FROM written_subjects s
    WHERE s.archived_at IS NULL AND s.description_text LIKE '% | %'
    ORDER BY s.id
    ON CONFLICT (subject_id) DO NOTHING;
    RETURN NULL;
END;
$$;
-- A transition table serves one event a trigger, hence two triggers with one body.
DROP TRIGGER IF EXISTS subjects_refinement_queue_insert ON subjects;
CREATE TRIGGER subjects_refinement_queue_insert
    AFTER INSERT ON subjects REFERENCING NEW TABLE AS written_subjects
    FOR EACH STATEMENT EXECUTE FUNCTION subject_refinement_queue_sync();
DROP TRIGGER IF EXISTS subjects_refinement_queue_update ON subjects;
CREATE TRIGGER subjects_refinement_queue_update
    AFTER UPDATE ON subjects REFERENCING NEW TABLE AS written_subjects
    FOR EACH STATEMENT EXECUTE FUNCTION subject_refinement_queue_sync();

INSERT INTO subject_refinement_queue (subject_id, user_id, kg_id)
SELECT id, user_id, kg_id FROM subjects
WHERE archived_at IS NULL AND description_text LIKE '% | %'
ON CONFLICT (subject_id) DO NOTHING;
DROP INDEX IF EXISTS subjects_pending_refinement_idx;

CREATE INDEX IF NOT EXISTS subjects_live_lower_name_idx
    ON subjects (user_id, kg_id, lower(subject_text)) WHERE archived_at IS NULL;
CREATE INDEX IF NOT EXISTS subjects_hubs_idx ON subjects (user_id, kg_id) WHERE hub_since IS NOT NULL;
ANALYZE subjects, subject_refinement_queue;
