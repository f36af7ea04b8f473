-- Benchmark setup: bulk-load synthetic pairs (binary COPY; bench/recall.py), marked dreamed afterwards by
-- bench/mark_user_dreamed (their pair_stages rows are made by the insert trigger, migration 0019).
COPY memory_pairs (id, user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                   token_count, content_hash, embedding, reply_embedding)
FROM STDIN (FORMAT BINARY)
