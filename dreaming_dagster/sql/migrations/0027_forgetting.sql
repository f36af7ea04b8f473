-- Forgetting (memory/forgetting.py): a user's pairs, sessions or whole memory deleted on request, and what
-- the fast path dreamed made visible to Dagster.
--
-- forget_log: the deletion audit trail. One row per graph a forget touched: what scope, how much went. It
-- never holds text, and for an erasure not even the user id (the user asked to be forgotten); a pair or
-- session deletion keeps the user id (the user is still there, and their own audit names them). Recall
-- processes read its newest id on every recall: when it moves past an erasure they drop what they hold in
-- memory (retrieval/lexical_postings.py), so no process keeps an erased user's postings.
CREATE TABLE IF NOT EXISTS forget_log (
    id               bigserial PRIMARY KEY,
    forgotten_at     timestamptz NOT NULL DEFAULT now(),
    scope            text NOT NULL CHECK (scope IN ('pairs', 'session', 'user')),
    kg_id            text NOT NULL,
    user_id          text CHECK (scope <> 'user' OR user_id IS NULL),
    pairs            integer NOT NULL DEFAULT 0 CHECK (pairs >= 0),
    subjects_deleted integer NOT NULL DEFAULT 0 CHECK (subjects_deleted >= 0),
    subjects_rebuilt integer NOT NULL DEFAULT 0 CHECK (subjects_rebuilt >= 0),
    passes_redacted  integer NOT NULL DEFAULT 0 CHECK (passes_redacted >= 0)
);
CREATE INDEX IF NOT EXISTS forget_log_erasures_idx ON forget_log (id) WHERE scope = 'user';

-- An erasure deletes the graph's whole word index in a few set-based statements, then its pairs: the
-- per-row removal of the delete trigger (0008) would do the same work pair by pair. A transaction that
-- sets dreaming.erasing_graph skips it; every other delete still maintains the index row by row.
CREATE OR REPLACE FUNCTION lexical_index_before_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND coalesce(current_setting('dreaming.erasing_graph', true), '') = 'on' THEN
        RETURN OLD;
    END IF;
    PERFORM lexical_index_apply(ARRAY[OLD.id], -1);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$;

-- A deleted subject sets merged_into / superseded_by of the subjects pointing at it to NULL (their foreign
-- keys): without an index each deleted subject scanned every subject of every user (erasing a 5,000-pair user,
-- 3,400 subjects: 13.8 s; with these: 0.23 s).
CREATE INDEX IF NOT EXISTS subjects_merged_into_idx ON subjects (merged_into) WHERE merged_into IS NOT NULL;
CREATE INDEX IF NOT EXISTS subjects_superseded_by_idx ON subjects (superseded_by) WHERE superseded_by IS NOT NULL;

-- The fast path's dreaming, for Dagster (defs/pipeline/sensors.py, fast_path_sensor): the last sync of each
-- graph with what it did, numbered by a sequence so the sensor reports each sync once as the partition's
-- asset events. One row per graph (the latest sync), so the table stays as small as the set of users.
CREATE SEQUENCE IF NOT EXISTS fast_path_syncs_seq;
CREATE TABLE IF NOT EXISTS fast_path_syncs (
    user_id   text NOT NULL,
    kg_id     text NOT NULL,
    seq       bigint NOT NULL DEFAULT nextval('fast_path_syncs_seq'),
    synced_at timestamptz NOT NULL DEFAULT now(),
    stages    jsonb NOT NULL,
    PRIMARY KEY (user_id, kg_id)
);
CREATE INDEX IF NOT EXISTS fast_path_syncs_seq_idx ON fast_path_syncs (seq);
