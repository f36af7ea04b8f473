-- bench/recall.py: how big the heavy user's graph and the pairs' HNSW index came out.
SELECT (SELECT count(*) FROM subject_memory_pair_links WHERE user_id = 'heavy') AS links,
       pg_size_pretty(pg_relation_size('memory_pairs_embedding_hnsw_idx')) AS hnsw_size;
