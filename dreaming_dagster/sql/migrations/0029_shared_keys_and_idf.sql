-- What several statements compute, defined once: the words of a question with their BM25 idf, and the keys
-- of the advisory locks the code takes.
--
-- bm25_idf: a word's BM25 idf in a corpus of pair_count pairs, document_frequency of which hold it (the
-- recall statement and lexical_query_words.sql both weigh the query's words with it).
CREATE OR REPLACE FUNCTION bm25_idf(pair_count float8, document_frequency float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ln(1 + (pair_count - document_frequency + 0.5) / (document_frequency + 0.5))
$$;

-- graph_lock_key: the session advisory lock one writer of a user's graph holds (storage/user_graphs.py);
-- the unit separator keeps ("a b", "c") and ("a", "b c") apart.
CREATE OR REPLACE FUNCTION graph_lock_key(user_id text, kg_id text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT hashtextextended('dreaming-graph' || chr(31) || user_id || chr(31) || kg_id, 0)
$$;

-- word_index_lock_class and word_index_lock_bucket: the two halves of the transaction lock a writer of a
-- user's lexical statistics takes (one of 256 buckets by user and graph; lexical_index_apply, migration
-- 0017, takes the same numbers, and tests/test_lexical.py holds the two equal).
CREATE OR REPLACE FUNCTION word_index_lock_class()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 2042119937
$$;

CREATE OR REPLACE FUNCTION word_index_lock_bucket(user_id text, kg_id text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (hashtextextended(user_id || '/' || kg_id, 0) & 255)::integer
$$;

-- question_words: the question's english lexemes that are words of the user's graph, with their document
-- frequency, idf and the graph's average pair length: the BM25 side of every statement that scores a question
-- (the ranking statement, the exact lexical top, lexical_query_words.sql). Only this user's vocabulary is read.
CREATE OR REPLACE FUNCTION question_words(for_user text, for_kg text, question text)
RETURNS TABLE (lexeme_id bigint, document_frequency bigint, idf float8, average_length float8)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT u.id, u.pair_count, bm25_idf(c.pair_count, u.pair_count),
           c.lexeme_count::float8 / greatest(c.pair_count, 1)
    FROM (SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', question)) AS t) q
    JOIN user_lexemes u ON u.user_id = for_user AND u.kg_id = for_kg AND u.lexeme = q.lexeme
    JOIN lexical_corpora c ON c.user_id = for_user AND c.kg_id = for_kg AND c.pair_count > 0
    WHERE u.pair_count > 0
$$;

-- erase_graph_state: delete one user's graph from the tables keyed by (user_id, kg_id) alone that no other
-- row refers to: the word statistics, the dream's audit and state, recall's profile, the fast-path record
-- (forget/erase_graph.sql). Returns how many rows went.
CREATE OR REPLACE FUNCTION erase_graph_state(for_user text, for_kg text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    keyed text;
    gone bigint;
    total bigint := 0;
BEGIN
    FOREACH keyed IN ARRAY ARRAY['user_lexemes', 'lexical_corpora', 'dreaming_passes', 'dreaming_state',
                                 'recall_profiles', 'fast_path_syncs'] LOOP
        EXECUTE format('DELETE FROM %I WHERE user_id = $1 AND kg_id = $2', keyed) USING for_user, for_kg;
        GET DIAGNOSTICS gone = ROW_COUNT;
        total := total + gone;
    END LOOP;
    RETURN total;
END;
$$;
