-- Token-budget consolidation passes (issue: dreaming passes).
-- dreaming_state: per (user, kg), the tokens saved since the last pass (added in the same transaction as
-- the pairs, so the counter and the memory never disagree), and the last pass.
CREATE TABLE IF NOT EXISTS dreaming_state (
    user_id                text NOT NULL,
    kg_id                  text NOT NULL,
    tokens_since_last_pass bigint NOT NULL DEFAULT 0,
    last_pass_at           timestamptz,
    last_pass_id           uuid,
    last_input_hash        text,
    PRIMARY KEY (user_id, kg_id)
);
CREATE INDEX IF NOT EXISTS dreaming_state_tokens_idx ON dreaming_state (tokens_since_last_pass);

-- The audit trail: one row per pass, with every proposed mutation and what became of it.
CREATE TABLE IF NOT EXISTS dreaming_passes (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id           text NOT NULL,
    kg_id             text NOT NULL,
    mode              text NOT NULL CHECK (mode IN ('incremental', 'compact')),
    provider          text NOT NULL,
    status            text NOT NULL CHECK (status IN ('applied', 'unchanged', 'failed')),
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL DEFAULT now(),
    input_tokens      integer NOT NULL DEFAULT 0,
    tokens_consumed   bigint NOT NULL DEFAULT 0,
    applied           integer NOT NULL DEFAULT 0,
    skipped           integer NOT NULL DEFAULT 0,
    failed            integer NOT NULL DEFAULT 0,
    decayed           integer NOT NULL DEFAULT 0,
    mutations         jsonb NOT NULL DEFAULT '[]'::jsonb,
    summary           text NOT NULL DEFAULT '',
    error             text
);
CREATE INDEX IF NOT EXISTS dreaming_passes_user_kg_idx ON dreaming_passes (user_id, kg_id, started_at DESC);

-- Subjects: what changed since a pass (updated_at, kept by a trigger so every writer counts), why a
-- subject left the live graph, what superseded it, and how far importance decay has been applied.
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS archive_reason text;
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS superseded_by uuid REFERENCES subjects (id) ON DELETE SET NULL;
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS decayed_through timestamptz;
CREATE INDEX IF NOT EXISTS subjects_user_kg_updated_idx ON subjects (user_id, kg_id, updated_at);

CREATE OR REPLACE FUNCTION subjects_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
DROP TRIGGER IF EXISTS subjects_touch_updated_at ON subjects;
CREATE TRIGGER subjects_touch_updated_at BEFORE UPDATE ON subjects
    FOR EACH ROW EXECUTE FUNCTION subjects_touch_updated_at();
