-- The exact BM25 top lexical_pool_size of a user's pairs for a question: the pair numbers (pair_words.pair_no)
-- whose score reaches the lexical_pool_size-th best, ties at the cut included, for the ranking statement's
-- lexical pool (composite_ranking.sql cuts them by score and id). retrieval/lexical_postings.py finds the same
-- pairs in the recall process from postings it holds; this statement serves what that cannot: as_of (only
-- pairs before it), training, and a recall process whose postings cache is off.
--
-- It reads only the postings that can matter (migration 0017's word blocks; a threshold algorithm over block
-- bounds). A block's bound is the largest BM25 weight any of its postings can have under the current
-- statistics (from its largest weight when written, and from its largest term frequency and shortest pair),
-- so it holds however the statistics move.
-- 1. The query words' blocks in one order, highest bound first. Reading a prefix of that order leaves each
--    word a residual, the highest bound among its blocks not read; a pair seen in no block read scores at
--    most the sum of the residuals.
-- 2. Theta: the best 2 × pool-size pairs by their sums over the first lexical_seed_postings postings,
--    scored exactly (pair_words); their pool-size-th best score is a real pair's real score, so at most
--    the true pool-size-th best (as_of: counted over pairs before it only).
-- 3. Read the shortest prefix whose residuals add up to less than half theta: every pair scoring theta or
--    more is then seen, and few pairs seen can still reach it (half: reading a posting costs far less
--    than scoring a pair). A pair seen is a candidate if its bound, the sum read plus the residuals of the
--    words it was not seen under, reaches theta.
-- 4. Candidates are scored exactly from their pair_words rows in two rounds: the 2 × pool-size best bounded
--    first, which with the seeds raise theta to their pool-size-th best score; then only the candidates
--    whose bound reaches that. (On the recall bench's heavy user, most of a long candidate list is cut.)
-- lexical_seed_postings 0 gives theta 0: every block is read (tests/test_lexical.py compares settings with
-- BM25 over every pair). The 1e-9 slacks keep floating-point rounding from dropping a tie. Postings are
-- unnested in the select list, not FROM (~2.5 times faster: no function scan per block).
--
-- Parameters: user_id, kg_id, query_text, lexical_pool_size, lexical_seed_postings, bm25_k1, bm25_b, as_of
-- (timestamptz or NULL).
WITH term_weights AS MATERIALIZED (
    SELECT lexeme_id, idf, average_length FROM question_words(%(user_id)s, %(kg_id)s, %(query_text)s::text)
),
-- The same words as two parallel arrays, the form pair_words_bm25 (migration 0018) scores a pair's forward row by.
query_words AS MATERIALIZED (
    SELECT array_agg(lexeme_id ORDER BY lexeme_id) AS lexeme_ids, array_agg(idf ORDER BY lexeme_id) AS idfs,
           min(average_length) AS average_length
    FROM term_weights
),
word_bounds AS MATERIALIZED (
    SELECT bounded.*,
           row_number() OVER (ORDER BY bound DESC, lexeme_id, block_no) AS position,
           sum(posting_count) OVER (ORDER BY bound DESC, lexeme_id, block_no ROWS UNBOUNDED PRECEDING)
               - posting_count AS postings_before,
           -- Reading this block lowers its word's residual to the bound of the word's next block.
           coalesce(lead(bound) OVER (PARTITION BY lexeme_id ORDER BY bound DESC, lexeme_id, block_no), 0)
               - bound AS residual_change,
           row_number() OVER (PARTITION BY lexeme_id ORDER BY bound DESC, lexeme_id, block_no) = 1 AS word_best
    FROM (SELECT tw.lexeme_id, b.block_no, b.posting_count,
                 -- The closer of the block's two bounds; max_weight is in k1 1.2, b 0.75 (migration 0017).
                 least(bm25_term_weight(tw.idf, b.max_term_frequency, b.min_pair_length, tw.average_length,
                                        %(bm25_k1)s::float8, %(bm25_b)s::float8),
                       CASE WHEN %(bm25_k1)s::float8 = 1.2 AND %(bm25_b)s::float8 = 0.75
                            THEN tw.idf * b.max_weight * greatest(1, tw.average_length / b.weight_length) END)
                     * (1 + 1e-9) AS bound
          FROM term_weights tw
          JOIN word_blocks b ON b.lexeme_id = tw.lexeme_id
          WHERE %(lexical_pool_size)s > 0) bounded
),
seed_sums AS MATERIALIZED (
    SELECT p.pair_no,
           sum(bm25_term_weight(p.idf, p.term_frequency, p.pair_length, p.average_length,
                                %(bm25_k1)s::float8, %(bm25_b)s::float8)) AS partial
    FROM (SELECT unnest(b.pair_nos) AS pair_no, unnest(b.term_frequencies) AS term_frequency,
                 unnest(b.pair_lengths) AS pair_length, tw.idf, tw.average_length
          FROM word_bounds wb
          JOIN word_blocks b USING (lexeme_id, block_no)
          JOIN term_weights tw USING (lexeme_id)
          WHERE wb.postings_before < %(lexical_seed_postings)s) p
    GROUP BY p.pair_no
    ORDER BY partial DESC
    LIMIT 2 * %(lexical_pool_size)s
),
-- The seed's best sums scored exactly (their pair_words rows): real scores of real pairs, so their
-- pool-size-th best is also at most the true one, and much closer than a sum over the first blocks only.
seed_scores AS MATERIALIZED (
    SELECT s.pair_no, scored.bm25
    FROM seed_sums s
    JOIN pair_words w ON w.pair_no = s.pair_no
    CROSS JOIN query_words q
    CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                       q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
    WHERE %(as_of)s::timestamptz IS NULL OR w.occurred_at < %(as_of)s::timestamptz
),
threshold AS MATERIALIZED (
    SELECT coalesce((SELECT bm25 FROM seed_scores ORDER BY bm25 DESC
                     OFFSET greatest(%(lexical_pool_size)s - 1, 0) LIMIT 1), 0) * (1 - 1e-9) AS theta
),
cutoff AS MATERIALIZED (
    SELECT coalesce(min(r.position) FILTER (WHERE r.residual < t.theta / 2), max(r.position)) AS position
    FROM (SELECT wb.position,
                 (SELECT sum(bound) FROM word_bounds WHERE word_best)
                 + sum(wb.residual_change) OVER (ORDER BY wb.position) AS residual
          FROM word_bounds wb) r
    CROSS JOIN threshold t
    GROUP BY t.theta
),
word_residuals AS MATERIALIZED (
    SELECT tw.lexeme_id, tw.idf, tw.average_length,
           coalesce((SELECT max(wb.bound) FROM word_bounds wb
                     WHERE wb.lexeme_id = tw.lexeme_id AND wb.position > (SELECT position FROM cutoff)), 0) AS residual
    FROM term_weights tw
),
-- The blocks to read, each with its word's idf and residual, so nothing is joined per posting below.
read_blocks AS MATERIALIZED (
    SELECT wb.lexeme_id, wb.block_no, wr.idf, wr.average_length, wr.residual
    FROM word_bounds wb
    JOIN word_residuals wr USING (lexeme_id)
    WHERE wb.position <= (SELECT position FROM cutoff)
),
lexical_candidates AS MATERIALIZED (
    -- A pair's bound: the sum read plus the residuals of the words it was not seen under, that is every
    -- word's residual plus what each word seen added beyond its own.
    SELECT seen.pair_no, seen.gain + (SELECT sum(residual) FROM word_residuals) AS bound
    FROM (SELECT p.pair_no,
                 sum(bm25_term_weight(p.idf, p.term_frequency, p.pair_length, p.average_length,
                                      %(bm25_k1)s::float8, %(bm25_b)s::float8) - p.residual) AS gain
          FROM (SELECT unnest(b.pair_nos) AS pair_no, unnest(b.term_frequencies) AS term_frequency,
                       unnest(b.pair_lengths) AS pair_length, rb.idf, rb.average_length, rb.residual
                FROM read_blocks rb
                JOIN word_blocks b USING (lexeme_id, block_no)) p
          GROUP BY p.pair_no) seen
    WHERE seen.gain + (SELECT sum(residual) FROM word_residuals) >= (SELECT theta FROM threshold)
),
-- Round one: the best-bounded candidates, scored exactly.
first_scores AS MATERIALIZED (
    SELECT w.pair_no, scored.bm25
    FROM (SELECT pair_no FROM lexical_candidates ORDER BY bound DESC, pair_no LIMIT 2 * %(lexical_pool_size)s) lc
    JOIN pair_words w ON w.pair_no = lc.pair_no
    CROSS JOIN query_words q
    CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                       q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
    WHERE %(as_of)s::timestamptz IS NULL OR w.occurred_at < %(as_of)s::timestamptz
),
-- The pool-size-th best real score known now (distinct pairs: a seed can be a candidate too), at most the
-- true one and at least theta.
raised_threshold AS MATERIALIZED (
    SELECT greatest((SELECT theta FROM threshold),
                    coalesce((SELECT bm25 FROM (SELECT pair_no, bm25 FROM first_scores
                                                UNION SELECT pair_no, bm25 FROM seed_scores) known
                              ORDER BY bm25 DESC OFFSET greatest(%(lexical_pool_size)s - 1, 0) LIMIT 1), 0)
                    * (1 - 1e-9)) AS theta
),
-- Round two: the other candidates whose bound reaches it.
second_scores AS MATERIALIZED (
    SELECT w.pair_no, scored.bm25
    FROM lexical_candidates lc
    JOIN pair_words w ON w.pair_no = lc.pair_no
    CROSS JOIN query_words q
    CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                       q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
    WHERE lc.bound >= (SELECT theta FROM raised_threshold)
      AND NOT EXISTS (SELECT 1 FROM first_scores f WHERE f.pair_no = lc.pair_no)
      AND (%(as_of)s::timestamptz IS NULL OR w.occurred_at < %(as_of)s::timestamptz)
),
scored AS (
    SELECT pair_no, bm25 FROM first_scores UNION ALL SELECT pair_no, bm25 FROM second_scores
)
-- Every pair reaching the pool-size-th best score (all of them when fewer were scored).
SELECT s.pair_no
FROM scored s
WHERE s.bm25 >= coalesce((SELECT bm25 FROM scored ORDER BY bm25 DESC
                          OFFSET greatest(%(lexical_pool_size)s - 1, 0) LIMIT 1), '-infinity')
ORDER BY s.pair_no;
