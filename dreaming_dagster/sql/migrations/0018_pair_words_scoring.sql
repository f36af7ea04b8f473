-- Exact BM25 from a pair's forward row (migration 0017), faster and stated once.
--
-- * Storage: pair_words' arrays were compressed in line (pglz), and every read of an element decompressed
--   the whole array again: scoring a candidate for a 10-word query decompressed ~20 arrays. Measured on the
--   100,000-pair recall bench user: scoring 3,000 pairs took 78 ms compressed, 38 ms uncompressed (of
--   which ~5-30 ms is fetching the rows, by cache). Uncompressed and kept in line up to a full page (a
--   row of ~670 words; longer ones go out of line, still uncompressed): ~1.5 KB a pair instead of ~1.4 KB.
-- * pair_words_bm25: a pair's BM25 for the query's words, given as two parallel arrays (the words' ids and
--   their idf). A set-returning SQL function of one SELECT, so the planner inlines it as a LATERAL
--   subquery: the recall statement scores its candidates in four places through this one body.

ALTER TABLE pair_words ALTER COLUMN lexeme_ids SET STORAGE EXTERNAL,
                       ALTER COLUMN term_frequencies SET STORAGE EXTERNAL,
                       SET (toast_tuple_target = 8160);

-- Rows already written keep their compressed values until rewritten: a new value is stored the new way.
UPDATE pair_words
SET lexeme_ids = lexeme_ids || '{}'::bigint[], term_frequencies = term_frequencies || '{}'::integer[]
WHERE pg_column_compression(lexeme_ids) IS NOT NULL OR pg_column_compression(term_frequencies) IS NOT NULL;

-- One row: the sum over the query's words the pair holds (NULL when it holds none). Not STRICT and not
-- VOLATILE, which would keep the planner from inlining it.
CREATE OR REPLACE FUNCTION pair_words_bm25(lexeme_ids bigint[], term_frequencies integer[], pair_length integer,
                                           query_lexeme_ids bigint[], query_idfs float8[], average_length float8,
                                           k1 float8, b float8)
RETURNS TABLE (bm25 float8)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT sum(bm25_term_weight(q.idf, term_frequencies[found.position], pair_length, average_length, k1, b))
    FROM unnest(query_lexeme_ids, query_idfs) AS q (lexeme_id, idf)
    CROSS JOIN LATERAL (SELECT array_position(lexeme_ids, q.lexeme_id) AS position) AS found
    WHERE found.position IS NOT NULL
$$;
