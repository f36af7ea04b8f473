-- Benchmark setup: bulk-load synthetic subjects (binary COPY; bench/recall.py).
COPY subjects (id, user_id, kg_id, subject_text, description_text, subject_type, embedding, created_at, last_seen_at)
FROM STDIN (FORMAT BINARY)
