-- What retrieval keeps per (user, kg) beside the pairs: the ranker's per-user inputs that would be too
-- slow to compute on every query, and the user's query history.
-- last_query_at / query_count: written by every recall (the "time since the last query" input).
-- memory_count, subject_count, subject_centroid: refreshed by the dreaming pipeline each time it changes
-- the user's graph (subjects change only there), so a query reads one row instead of averaging thousands
-- of subject vectors (~90 ms at 20,000 subjects).
CREATE TABLE IF NOT EXISTS recall_profiles (
    user_id          text NOT NULL,
    kg_id            text NOT NULL,
    last_query_at    timestamptz,
    query_count      bigint NOT NULL DEFAULT 0 CHECK (query_count >= 0),
    memory_count     bigint CHECK (memory_count >= 0),
    subject_count    bigint CHECK (subject_count >= 0),
    subject_centroid vector({{ embedding_dimension }}),
    refreshed_at     timestamptz,
    PRIMARY KEY (user_id, kg_id)
);

-- The caller's current session: the same-session signal and the ranker's session-size input.
CREATE INDEX IF NOT EXISTS memory_pairs_user_kg_session_idx ON memory_pairs (user_id, kg_id, session_id);
