-- Per (user, kg) state that retrieval keeps between queries: when the user last asked something
-- (the ranker's "time since the last query" input) and how many recalls were served.
CREATE TABLE IF NOT EXISTS recall_state (
    user_id       text NOT NULL,
    kg_id         text NOT NULL,
    last_query_at timestamptz NOT NULL,
    query_count   bigint NOT NULL DEFAULT 0 CHECK (query_count >= 0),
    PRIMARY KEY (user_id, kg_id)
);
