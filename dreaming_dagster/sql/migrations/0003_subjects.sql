-- Durable subjects extracted from memory pairs: one side of the bipartite graph.
CREATE TABLE IF NOT EXISTS subjects (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id             text NOT NULL CHECK (user_id ~ '^[A-Za-z0-9_.@-]{1,128}$'),
    kg_id               text NOT NULL DEFAULT 'default',
    subject_text        text NOT NULL CHECK (length(btrim(subject_text)) > 0),
    description_text    text NOT NULL DEFAULT '',
    subject_type        text NOT NULL DEFAULT 'other',
    embedding           vector({{ embedding_dimension }}),
    is_key_subject      boolean NOT NULL DEFAULT false,
    importance          real NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    reinforcement_count integer NOT NULL DEFAULT 1 CHECK (reinforcement_count >= 0),
    refined_at          timestamptz,
    pinned              boolean NOT NULL DEFAULT false,
    archived_at         timestamptz,
    merged_into         uuid REFERENCES subjects (id) ON DELETE SET NULL
);

-- Exact-string guard for live subjects: two jobs that both miss the cosine search and insert the same
-- text get one row (INSERT … ON CONFLICT returns the existing id). Archived subjects leave the guard.
CREATE UNIQUE INDEX IF NOT EXISTS subjects_live_text_key
    ON subjects (user_id, kg_id, md5(subject_text)) WHERE archived_at IS NULL;
CREATE INDEX IF NOT EXISTS subjects_user_kg_idx ON subjects (user_id, kg_id);
CREATE INDEX IF NOT EXISTS subjects_embedding_hnsw_idx
    ON subjects USING hnsw (embedding vector_cosine_ops);
