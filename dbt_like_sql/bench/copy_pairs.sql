-- Benchmark setup: bulk-load synthetic, fully dreamed pairs (binary COPY; bench/recall.py).
COPY memory_pairs (id, user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                   token_count, content_hash, embedding, reply_embedding, extracted_at, subjects_merged_at, kg_stored_at)
FROM STDIN (FORMAT BINARY)
