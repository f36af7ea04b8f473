-- The whole knowledge graph: one junction table. Two subjects are related when they share pairs;
-- the strength of the relation is the count of shared pairs, computed at query time.
CREATE TABLE IF NOT EXISTS subject_memory_pair_links (
    subject_id uuid NOT NULL REFERENCES subjects (id) ON DELETE CASCADE,
    pair_id    uuid NOT NULL REFERENCES memory_pairs (id) ON DELETE CASCADE,
    user_id    text NOT NULL,
    kg_id      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject_id, pair_id)
);

CREATE INDEX IF NOT EXISTS subject_memory_pair_links_pair_idx ON subject_memory_pair_links (pair_id);
CREATE INDEX IF NOT EXISTS subject_memory_pair_links_user_kg_idx ON subject_memory_pair_links (user_id, kg_id);
