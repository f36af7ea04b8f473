-- Lexical retrieval with Postgres' built-in full-text search, for bench/lexical.py. The question's lexemes
-- are OR-ed: an AND query (plainto_tsquery) would demand that a pair contain every word of the question.
-- normalization: ts_rank's length-normalization flags.
WITH q AS (
    SELECT replace(plainto_tsquery('english', %(question)s)::text, ' & ', ' | ')::tsquery AS query
)
SELECT d.content_hash,
       CASE WHEN %(ranker)s = 'ts_rank_cd' THEN ts_rank_cd(d.document, q.query, %(normalization)s)
            ELSE ts_rank(d.document, q.query, %(normalization)s) END AS score
FROM bench_pair_documents d, q
WHERE d.user_id = %(user_id)s AND q.query::text <> '' AND d.document @@ q.query
ORDER BY score DESC, d.id
LIMIT %(k)s;
