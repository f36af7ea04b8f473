-- The query's words in the user's vocabulary with their BM25 idf under the user's current statistics and
-- a version of each word's postings: what retrieval/lexical_postings.py needs to score the exact BM25 top-k
-- in the recall process from the postings it holds. The words and idf are composite_ranking.sql's
-- term_weights.
--
-- A word's version is its user_lexemes row's xmin (the transaction that last wrote it) with its pair count:
-- every write of a word's postings updates that row in the same transaction (lexical_index_apply, migration
-- 0017: an insert adds to pair_count, a removal subtracts), so an unchanged version means unchanged
-- postings. A re-sort only moves postings between blocks. Another cluster, or a database made anew, can
-- reuse word ids and xids: the caller keys what it holds by the server's start time and the database.
--
-- last_erasure and last_forget are forget_log's newest ids (migration 0027): a process that sees them move
-- drops what it holds of forgotten memory (an erased user's postings; cached subject names).
--
-- Parameters: user_id, kg_id, query_text.
WITH query_terms AS MATERIALIZED (
    SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', %(query_text)s::text)) AS t
),
corpus AS MATERIALIZED (
    SELECT c.pair_count::float8 AS pair_count, c.lexeme_count::float8 / greatest(c.pair_count, 1) AS average_length
    FROM lexical_corpora c
    WHERE c.user_id = %(user_id)s AND c.kg_id = %(kg_id)s AND c.pair_count > 0
),
words AS (
    SELECT u.id AS lexeme_id,
           ln(1 + (c.pair_count - u.pair_count + 0.5) / (u.pair_count + 0.5)) AS idf,
           c.average_length,
           u.xmin::text::bigint AS version, u.pair_count
    FROM query_terms q
    JOIN user_lexemes u ON u.user_id = %(user_id)s AND u.kg_id = %(kg_id)s AND u.lexeme = q.lexeme
    CROSS JOIN corpus c
    WHERE u.pair_count > 0
)
-- One row at least (lexeme_id NULL: no query word is the user's), so the process always learns of forgets.
SELECT w.lexeme_id, w.idf, w.average_length, w.version, w.pair_count,
       pg_postmaster_start_time() AS server_started,
       (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())::bigint AS database_oid,
       (SELECT max(f.id) FROM forget_log f WHERE f.scope = 'user') AS last_erasure,
       (SELECT max(f.id) FROM forget_log f) AS last_forget
FROM (SELECT 1) AS one
LEFT JOIN words w ON true
ORDER BY w.lexeme_id;
