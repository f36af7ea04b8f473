-- The pairs of benchmark users (training/encoder.py), with their texts and both vectors, oldest first.
-- Params: user_ids (text[]), kg_id.
SELECT user_id, id, content_hash, session_id, occurred_at, user_message, assistant_message, embedding,
       reply_embedding
FROM memory_pairs
WHERE user_id = ANY(%(user_ids)s) AND kg_id = %(kg_id)s
ORDER BY user_id, occurred_at, session_id, turn_index;
