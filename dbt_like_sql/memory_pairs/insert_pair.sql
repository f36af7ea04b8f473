-- Stage 1: persist one exchange. The pipeline checkpoints stay NULL; a duplicate (same user, kg and
-- content hash) inserts nothing and returns no row.
INSERT INTO memory_pairs (
    user_id, kg_id, session_id, turn_index, user_message, assistant_message,
    occurred_at, token_count, content_hash, metadata, embedding, reply_embedding
)
VALUES (
    %(user_id)s, %(kg_id)s, %(session_id)s, %(turn_index)s, %(user_message)s, %(assistant_message)s,
    %(occurred_at)s, %(token_count)s, %(content_hash)s, %(metadata)s, %(embedding)s, %(reply_embedding)s
)
ON CONFLICT (user_id, kg_id, content_hash) DO NOTHING
RETURNING id;
