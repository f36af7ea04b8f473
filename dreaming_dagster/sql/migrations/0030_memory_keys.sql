-- Index keys (extraction/keys.py): besides its two vectors, a pair is found through short texts of its own —
-- what the user states about themselves, and the dated events of the user's turn — each a row with its own
-- vector and words, pointing to the pair. Recall draws candidates by key and ranks them with key_match
-- (retrieval/composite_ranking.sql). Written by the keying stage (pipeline/keying.py); gone with the pair.
-- user_id and kg_id are the pair's: every query scopes by them.
CREATE TABLE IF NOT EXISTS memory_keys (
    pair_id   uuid NOT NULL REFERENCES memory_pairs (id) ON DELETE CASCADE,
    user_id   text NOT NULL,
    kg_id     text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('statement', 'event')),
    position  integer NOT NULL CHECK (position >= 0),
    key_text  text NOT NULL CHECK (length(key_text) BETWEEN 1 AND 400),
    words     tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, key_text)) STORED,
    embedding vector({{ embedding_dimension }}),
    PRIMARY KEY (pair_id, kind, position)
);
CREATE INDEX IF NOT EXISTS memory_keys_user_idx ON memory_keys (user_id, kg_id);
CREATE INDEX IF NOT EXISTS memory_keys_embedding_idx ON memory_keys USING hnsw (embedding vector_cosine_ops);

-- The keying stage's checkpoint, beside the others. Existing pairs are pending: the next run keys them.
ALTER TABLE pair_stages ADD COLUMN IF NOT EXISTS keyed_at timestamptz;
CREATE INDEX IF NOT EXISTS pair_stages_pending_keying_idx ON pair_stages (user_id, kg_id) WHERE keyed_at IS NULL;
