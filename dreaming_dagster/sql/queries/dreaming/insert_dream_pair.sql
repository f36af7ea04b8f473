-- The dreamer remembers: a pass's summary becomes a memory pair of the reserved dream session. Its pipeline
-- checkpoints are set so no subjects are extracted from it (no feedback loop); it is embedded like any pair.
-- Its pair_stages row is written here, born dreamed (the insert trigger adds only rows still missing).
WITH inserted AS (
    INSERT INTO memory_pairs (user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                              token_count, content_hash, metadata)
    VALUES (%(user_id)s, %(kg_id)s, %(session_id)s, NULL, %(user_message)s, %(assistant_message)s, now(),
            %(token_count)s, %(content_hash)s, %(metadata)s)
    ON CONFLICT (user_id, kg_id, content_hash) DO NOTHING
    RETURNING id, user_id, kg_id
)
INSERT INTO pair_stages (pair_id, user_id, kg_id, extracted_at, subjects_merged_at, kg_stored_at)
SELECT id, user_id, kg_id, now(), now(), now() FROM inserted;
