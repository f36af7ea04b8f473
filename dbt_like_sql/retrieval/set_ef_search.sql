-- HNSW search breadth for this connection. pgvector 0.6 returns at most ef_search rows from one index
-- scan, so it must be at least the pool size; larger values trade latency for recall of the true top-K.
SELECT set_config('hnsw.ef_search', %(ef_search)s, false);
