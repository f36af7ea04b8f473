-- Benchmark setup: bulk-load synthetic index keys (binary COPY; bench/synthetic.py).
COPY memory_keys (pair_id, user_id, kg_id, kind, position, key_text, embedding) FROM STDIN (FORMAT BINARY)
