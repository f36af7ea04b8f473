-- One row per exchange (a user message and the assistant's reply): stage 1 of dreaming.
-- The checkpoint columns (embedding, summary … kg_stored_at) are NULL on insert: each pipeline stage
-- selects the rows whose previous checkpoint is set and whose own is NULL, so every stage restarts
-- from the database alone.
CREATE TABLE IF NOT EXISTS memory_pairs (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id            text NOT NULL CHECK (user_id ~ '^[A-Za-z0-9_.@-]{1,128}$'),
    kg_id              text NOT NULL DEFAULT 'default' CHECK (kg_id ~ '^[A-Za-z0-9_.@-]{1,128}$'),
    session_id         text NOT NULL,
    turn_index         integer CHECK (turn_index >= 0),
    user_message       text NOT NULL CHECK (length(user_message) <= 100000),
    assistant_message  text NOT NULL CHECK (length(assistant_message) <= 100000),
    occurred_at        timestamptz NOT NULL,
    ingested_at        timestamptz NOT NULL DEFAULT now(),
    token_count        integer NOT NULL CHECK (token_count >= 0),
    content_hash       text NOT NULL,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    embedding          vector({{ embedding_dimension }}),
    summary            text,
    extracted_subjects jsonb,
    extracted_at       timestamptz,
    kg_stored_at       timestamptz,
    attempts           integer NOT NULL DEFAULT 0,
    last_error         text,
    CHECK (length(btrim(user_message)) > 0 OR length(btrim(assistant_message)) > 0)
);

-- The same pair saved twice is one row (content_hash covers session, turn, time and both messages).
CREATE UNIQUE INDEX IF NOT EXISTS memory_pairs_user_kg_content_hash_key
    ON memory_pairs (user_id, kg_id, content_hash);
CREATE INDEX IF NOT EXISTS memory_pairs_user_kg_occurred_at_idx
    ON memory_pairs (user_id, kg_id, occurred_at);
CREATE INDEX IF NOT EXISTS memory_pairs_embedding_hnsw_idx
    ON memory_pairs USING hnsw (embedding vector_cosine_ops);
-- Partial indexes keep "who has pending work?" cheap however large the table grows.
CREATE INDEX IF NOT EXISTS memory_pairs_pending_embedding_idx
    ON memory_pairs (user_id, kg_id) WHERE embedding IS NULL;
CREATE INDEX IF NOT EXISTS memory_pairs_pending_extraction_idx
    ON memory_pairs (user_id, kg_id) WHERE extracted_at IS NULL;
CREATE INDEX IF NOT EXISTS memory_pairs_pending_kg_store_idx
    ON memory_pairs (user_id, kg_id) WHERE extracted_at IS NOT NULL AND kg_stored_at IS NULL;
