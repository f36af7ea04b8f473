-- The query's words in the user's vocabulary with their BM25 idf under the user's current statistics and
-- a version of each word's postings: what retrieval/lexical_postings.py needs to score the exact BM25 top-k
-- in the recall process from the postings it holds. The words and idf are question_words' (migration 0029),
-- as the ranking statement reads them.
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
WITH words AS (
    SELECT q.lexeme_id, q.idf, q.average_length, u.xmin::text::bigint AS version, u.pair_count
    FROM question_words(%(user_id)s, %(kg_id)s, %(query_text)s::text) q
    JOIN user_lexemes u ON u.id = q.lexeme_id
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
