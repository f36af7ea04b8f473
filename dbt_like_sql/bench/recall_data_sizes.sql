-- bench/recall.py: how big the heavy user's graph, the pairs' HNSW indexes and the lexical index came out.
SELECT (SELECT count(*) FROM subject_memory_pair_links WHERE user_id = 'heavy') AS links,
       pg_size_pretty(pg_relation_size('memory_pairs_embedding_hnsw_idx')
                      + pg_relation_size('memory_pairs_reply_embedding_hnsw_idx')) AS hnsw_size,
       (SELECT count(*) FROM pair_lexemes pl JOIN user_lexemes u ON u.id = pl.lexeme_id
        WHERE u.user_id = 'heavy') AS postings,
       pg_size_pretty(pg_total_relation_size('pair_lexemes') + pg_total_relation_size('user_lexemes'))
           AS lexical_size;
