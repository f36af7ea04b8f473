-- bench/recall.py: how big the heavy user's graph, the pairs' HNSW indexes and the lexical index came out.
-- The lexical index (migrations 0008, 0017) is every user's: its bytes over all pairs give bytes a pair.
SELECT (SELECT count(*) FROM subject_memory_pair_links WHERE user_id = 'heavy') AS links,
       pg_size_pretty(pg_relation_size('memory_pairs_embedding_hnsw_idx')
                      + pg_relation_size('memory_pairs_reply_embedding_hnsw_idx')) AS hnsw_size,
       (SELECT sum(cardinality(w.lexeme_ids)) FROM pair_words w JOIN memory_pairs p ON p.id = w.pair_id
        WHERE p.user_id = 'heavy') AS postings,
       pg_total_relation_size('pair_words') + pg_total_relation_size('word_blocks')
           + pg_total_relation_size('user_lexemes') + pg_total_relation_size('lexical_corpora') AS lexical_bytes,
       (SELECT count(*) FROM pair_words) AS indexed_pairs,
       (SELECT jsonb_object_agg(name, bytes) FROM (VALUES
           ('pair_words', pg_total_relation_size('pair_words')),
           ('word_blocks', pg_total_relation_size('word_blocks')),
           ('user_lexemes', pg_total_relation_size('user_lexemes')),
           ('lexical_corpora', pg_total_relation_size('lexical_corpora'))) AS parts (name, bytes)) AS lexical_parts;
