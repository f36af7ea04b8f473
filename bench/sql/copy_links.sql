-- Benchmark setup: bulk-load synthetic subject↔pair links (binary COPY; bench/recall.py).
COPY subject_memory_pair_links (subject_id, pair_id, user_id, kg_id) FROM STDIN (FORMAT BINARY)
