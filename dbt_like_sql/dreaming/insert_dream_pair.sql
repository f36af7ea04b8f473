-- The dreamer remembers: a pass's summary becomes a memory pair of the reserved dream session. Its pipeline
-- checkpoints are set so no subjects are extracted from it (no feedback loop); it is embedded like any pair.
INSERT INTO memory_pairs (user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                          token_count, content_hash, metadata, extracted_at, subjects_merged_at, kg_stored_at)
VALUES (%(user_id)s, %(kg_id)s, %(session_id)s, NULL, %(user_message)s, %(assistant_message)s, now(),
        %(token_count)s, %(content_hash)s, %(metadata)s, now(), now(), now())
ON CONFLICT (user_id, kg_id, content_hash) DO NOTHING;
