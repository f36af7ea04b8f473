-- Benchmark setup: copy a user's oldest pairs, embeddings included, to another user (no re-embedding).
INSERT INTO memory_pairs (user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                          token_count, content_hash, metadata, embedding, reply_embedding)
SELECT %(target)s, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at, token_count,
       content_hash, metadata, embedding, reply_embedding
FROM memory_pairs WHERE user_id = %(source)s ORDER BY occurred_at, turn_index LIMIT %(limit)s;
