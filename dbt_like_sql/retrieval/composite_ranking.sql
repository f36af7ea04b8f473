-- Retrieval: the user's candidate pool and the eight ranking signals, scored and ordered, in one
-- statement. Serving (recall) and training read these same rows, so they can never disagree.
--
-- Parameters: user_id, kg_id, query (vector), query_text, pool_size (vector candidates), lexical_pool_size
-- (BM25 candidates; 0 for a vector-only pool), lexical_postings_budget, lexical_postings_per_word,
-- lexical_rescore, bm25_k1, bm25_b, as_of (timestamptz or NULL: only pairs
-- that happened before it), reference_time (the "now" of rec_exp: as_of or the wall clock), session_id
-- (the caller's session or NULL), weights (float8[8], in signal order), scale, row_limit, remember_query,
-- hub_share and hub_min_pairs (pipeline/hubs.HubRule), graph_pool_size (graph candidates; 0: none) and
-- graph_subjects (the subjects nearest the query the graph side starts from).
--
-- Pool: the union of the top pool_size pairs by cosine, the top lexical_pool_size pairs by BM25 over the
-- user's lexical index (migration 0008) and up to graph_pool_size pairs reached through the subjects
-- nearest the query, each candidate with every signal.
-- Vector side: a pair has two vectors (migration 0009: its user turn and its assistant turn) and its
-- similarity is the better of the two. The top pool_size by that similarity is always inside the union of
-- the top pool_size of each vector, so two index scans and a cut give it. The approximate CTEs let the
-- planner use the HNSW indexes (they need hnsw.ef_search >= pool_size, set by the recall connection).
-- pgvector 0.6 filters an HNSW scan after the fact, so when the user owns a small share of a large index
-- the scan can come back short; then, and only then (a one-time filter, never executed otherwise), the
-- user's pairs are scanned exactly.
-- Lexical side: the query's english lexemes, weighted by the user's idf, summed over the postings of the
-- user's pairs (BM25). The statistics are the user's whole corpus, as_of or not; only the candidates are
-- filtered by time. bm25_term_weight (migration 0010) is one word's BM25 term weight.
WITH query_terms AS MATERIALIZED (
    SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', %(query_text)s::text)) AS t
),
corpus AS MATERIALIZED (
    SELECT c.pair_count::float8 AS pair_count, c.lexeme_count::float8 / greatest(c.pair_count, 1) AS average_length
    FROM lexical_corpora c
    WHERE c.user_id = %(user_id)s AND c.kg_id = %(kg_id)s AND c.pair_count > 0
),
-- The query's words in the user's vocabulary (so only this user's postings are ever read), with their idf.
term_weights AS MATERIALIZED (
    SELECT u.id AS lexeme_id, u.pair_count AS document_frequency,
           ln(1 + (c.pair_count - u.pair_count + 0.5) / (u.pair_count + 0.5)) AS idf, c.average_length
    FROM query_terms q
    JOIN user_lexemes u ON u.user_id = %(user_id)s AND u.kg_id = %(kg_id)s AND u.lexeme = q.lexeme
    CROSS JOIN corpus c
    WHERE u.pair_count > 0
),
approximate AS MATERIALIZED (
    SELECT id, embedding <=> %(query)s AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
      AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)
    ORDER BY embedding <=> %(query)s
    LIMIT %(pool_size)s
),
approximate_replies AS MATERIALIZED (
    SELECT id, reply_embedding <=> %(query)s AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND reply_embedding IS NOT NULL
      AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)
    ORDER BY reply_embedding <=> %(query)s
    LIMIT %(pool_size)s
),
exact AS MATERIALIZED (
    -- MATERIALIZED keeps the planner from turning this into an (approximate) index scan again.
    -- LEAST skips NULL: a pair without a reply vector is its first vector's distance.
    SELECT id, least(embedding <=> %(query)s, reply_embedding <=> %(query)s) AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
      AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)
),
vector_pool AS (
    (SELECT id FROM (SELECT id, min(distance) AS distance
                     FROM (SELECT id, distance FROM approximate
                           UNION ALL SELECT id, distance FROM approximate_replies) AS both_scans
                     GROUP BY id) AS best
     WHERE (SELECT count(*) FROM approximate) >= %(pool_size)s
     ORDER BY distance, id
     LIMIT %(pool_size)s)
    UNION ALL
    (SELECT id FROM exact
     WHERE (SELECT count(*) FROM approximate) < %(pool_size)s
     ORDER BY distance, id
     LIMIT %(pool_size)s)
),
-- The lexical pool. Each query word reads its best postings (by impact, its tf weight), rarest word first
-- out of a shared budget: a word reads what the rarer words left of lexical_postings_budget, and at least
-- lexical_postings_per_word. Rare words carry BM25 (high idf) and have short lists, so they are read whole;
-- common words, long lists of low weight, get the floor. The top lexical_rescore × lexical_pool_size pairs
-- by those partial sums are then scored exactly (a primary-key lookup per pair and word) and the best
-- lexical_pool_size kept. Exact whenever every word's list fits; bench/recall.py measures, at 100,000
-- pairs, how much of the exact top 50 it finds against plain per-word caps at the same cost. A pair
-- missing from every word's best postings is not drawn; its lex signal, below, is still exact if cosine
-- draws it.
word_budgets AS MATERIALIZED (
    SELECT tw.lexeme_id, tw.idf, tw.average_length,
           greatest(%(lexical_postings_per_word)s::bigint,
                    %(lexical_postings_budget)s::bigint
                    - coalesce(sum(least(tw.document_frequency, %(lexical_postings_budget)s::bigint)) OVER (
                          ORDER BY tw.idf DESC, tw.lexeme_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))
               AS postings
    FROM term_weights tw
),
lexical_partial AS MATERIALIZED (
    SELECT best.pair_id AS id
    FROM word_budgets wb
    CROSS JOIN LATERAL (
        SELECT pl.pair_id,
               bm25_term_weight(wb.idf, pl.term_frequency, pl.pair_length, wb.average_length,
                                %(bm25_k1)s::float8, %(bm25_b)s::float8) AS weight
        FROM pair_lexemes pl
        WHERE pl.lexeme_id = wb.lexeme_id
          AND (%(as_of)s::timestamptz IS NULL OR pl.occurred_at < %(as_of)s::timestamptz)
        ORDER BY pl.impact DESC, pl.pair_id
        LIMIT wb.postings
    ) best
    WHERE %(lexical_pool_size)s > 0
    GROUP BY best.pair_id
    ORDER BY sum(best.weight) DESC, best.pair_id
    LIMIT %(lexical_rescore)s::int * %(lexical_pool_size)s
),
-- The graph side of the pool: pairs the vectors and the words both missed, reached through the user's
-- subjects nearest the query — by subject embedding (the graph_subjects nearest) and by subject-name words
-- (subjects whose name holds a query word) — never through a flagged hub. Each linked pair not already
-- drawn scores its best subject's similarity × specificity (pipeline/hubs.py, over the whole corpus); the
-- best graph_pool_size are drawn. A user's subjects are few (thousands for a heavy user), so they are
-- scanned exactly, which a filtered HNSW scan would not be.
query_subjects AS MATERIALIZED (
    SELECT nearest.id, nearest.similarity
    FROM (SELECT s.id, 1 - (s.embedding <=> %(query)s) AS similarity
          FROM subjects s
          WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
            AND s.hub_since IS NULL AND s.embedding IS NOT NULL AND %(graph_pool_size)s > 0
          ORDER BY s.embedding <=> %(query)s, s.id
          LIMIT %(graph_subjects)s) nearest
    UNION
    SELECT named.id, named.similarity
    FROM (SELECT s.id, coalesce(1 - (s.embedding <=> %(query)s), 0) AS similarity
          FROM subjects s
          WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
            AND s.hub_since IS NULL AND %(graph_pool_size)s > 0
            AND to_tsvector('english', s.subject_text)
                @@ (SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery FROM query_terms)
          ORDER BY s.embedding <=> %(query)s, s.id
          LIMIT %(graph_subjects)s) named
),
graph_links AS MATERIALIZED (
    SELECT l.pair_id,
           max(qs.similarity * (1 - ln(greatest(counted.link_count, 1)) / ln(greatest(n.pairs, 2)))) AS weight
    FROM query_subjects qs
    CROSS JOIN (SELECT coalesce((SELECT pair_count FROM corpus), 0)::float8 AS pairs) n
    CROSS JOIN LATERAL (SELECT count(*) AS link_count FROM subject_memory_pair_links c
                        WHERE c.subject_id = qs.id) counted
    JOIN subject_memory_pair_links l ON l.subject_id = qs.id
    GROUP BY l.pair_id
),
graph_pool AS MATERIALIZED (
    SELECT g.pair_id AS id
    FROM graph_links g
    JOIN memory_pairs p ON p.id = g.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
    WHERE (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM vector_pool v WHERE v.id = g.pair_id)
      AND NOT EXISTS (SELECT 1 FROM lexical_partial lp WHERE lp.id = g.pair_id)
    ORDER BY g.weight DESC, g.pair_id
    LIMIT %(graph_pool_size)s
),
-- Exact BM25 (the lex signal) of every pair either side drew: the lexical side's partial-sum leaders (to
-- re-rank them) and the vector pool (for their lex). One primary-key lookup per (pair, query word); the
-- LIMIT keeps the lookup a lookup: as a plain join the planner reads every posting of each query word
-- (measured: 121,000 rows and 30 ms for a 100,000-pair user, against well under a millisecond of lookups).
exact_bm25 AS MATERIALIZED (
    SELECT drawn.id,
           sum(bm25_term_weight(tw.idf, pl.term_frequency, pl.pair_length, tw.average_length,
                                %(bm25_k1)s::float8, %(bm25_b)s::float8)) AS bm25
    FROM (SELECT id FROM lexical_partial UNION SELECT id FROM vector_pool UNION SELECT id FROM graph_pool) AS drawn
    CROSS JOIN term_weights tw
    CROSS JOIN LATERAL (
        SELECT p.term_frequency, p.pair_length FROM pair_lexemes p
        WHERE p.lexeme_id = tw.lexeme_id AND p.pair_id = drawn.id
        LIMIT 1
    ) pl
    GROUP BY drawn.id
),
lexical_pool AS MATERIALIZED (
    SELECT lp.id
    FROM lexical_partial lp
    JOIN exact_bm25 e USING (id)
    ORDER BY e.bm25 DESC, lp.id
    LIMIT %(lexical_pool_size)s
),
pool AS (
    SELECT coalesce(v.id, l.id) AS id, v.id IS NOT NULL AS in_vector_pool, l.id IS NOT NULL AS in_lexical_pool,
           false AS in_graph_pool
    FROM vector_pool v
    FULL JOIN lexical_pool l ON l.id = v.id
    UNION ALL
    SELECT id, false, false, true FROM graph_pool
),
-- Similarity: the better of the pair's two vectors. A pair whose embedding is still pending (lexical
-- candidates can be) has similarity 0.
candidates AS MATERIALIZED (
    SELECT p.id, p.session_id, p.turn_index, p.occurred_at, p.user_message, p.assistant_message,
           p.metadata, p.content_hash, pool.in_vector_pool, pool.in_lexical_pool, pool.in_graph_pool,
           coalesce(1 - least(p.embedding <=> %(query)s, p.reply_embedding <=> %(query)s), 0) AS similarity,
           coalesce(cb.bm25, 0) AS bm25
    FROM pool
    JOIN memory_pairs p ON p.id = pool.id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
    LEFT JOIN exact_bm25 cb ON cb.id = pool.id
),
-- The graph side: each candidate's live subjects (the junction table is the whole graph). The CTEs below
-- are MATERIALIZED so each is computed once: the planner cannot estimate the pool's size and, inlined,
-- would re-run them inside nested loops (measured: 4x slower for small users).
candidate_subjects AS (
    SELECT c.id AS pair_id, s.id AS subject_id, 1 - (s.embedding <=> %(query)s) AS subject_similarity
    FROM candidates c
    JOIN subject_memory_pair_links l
      ON l.pair_id = c.id AND l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s
    JOIN subjects s
      ON s.id = l.subject_id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
),
-- How often each of those subjects comes up: its links over the user's whole memory (before as_of).
-- One index-only count per subject (LATERAL), never a scan of the user's links: a heavy user has
-- hundreds of thousands. The subject ids are already this user's (checked against subjects.user_id
-- above) and a link always carries its subject's user (pipeline/insert_links), so no user filter is needed
-- here, and leaving it out keeps the count inside the primary-key index.
subject_link_counts AS MATERIALIZED (
    SELECT ds.subject_id, counted.link_count
    FROM (SELECT DISTINCT subject_id FROM candidate_subjects) ds
    CROSS JOIN LATERAL (
        SELECT count(*) AS link_count
        FROM subject_memory_pair_links l
        WHERE l.subject_id = ds.subject_id
          AND (%(as_of)s::timestamptz IS NULL OR EXISTS (
                SELECT 1 FROM memory_pairs lp
                WHERE lp.id = l.pair_id AND lp.occurred_at < %(as_of)s::timestamptz))
    ) counted
),
-- How specific each subject is (pipeline/hubs.py): an IDF over the user's pairs scaled to [0, 1],
-- ln(N/n)/ln(N), and 0 for a hub (more than hub_share of the N pairs, once N >= hub_min_pairs). N is the
-- user's whole corpus (as for BM25); n the subject's links before as_of. A speaker's name on most pairs
-- then adds nothing to subj_freq, subj_sem or neighbor_density.
subject_weights AS MATERIALIZED (
    SELECT slc.subject_id, slc.link_count,
           CASE WHEN n.pairs >= %(hub_min_pairs)s AND slc.link_count > %(hub_share)s::float8 * n.pairs THEN 0::float8
                WHEN n.pairs < 2 THEN 1::float8
                ELSE least(greatest(ln(n.pairs / greatest(slc.link_count, 1)) / ln(n.pairs), 0), 1) END AS specificity
    FROM subject_link_counts slc
    CROSS JOIN (SELECT coalesce((SELECT pair_count FROM corpus), 0)::float8 AS pairs) n
),
pair_subject_scores AS MATERIALIZED (
    SELECT cs.pair_id,
           sum(sw.link_count * sw.specificity)::float8 AS subject_links,
           max(cs.subject_similarity) FILTER (WHERE sw.specificity > 0) AS best_subject_similarity
    FROM candidate_subjects cs
    JOIN subject_weights sw USING (subject_id)
    GROUP BY cs.pair_id
),
-- Each candidate's neighbours: the other candidates sharing a subject with it, each counted by the most
-- specific subject they share (a shared hub counts 0).
neighbor_counts AS MATERIALIZED (
    SELECT shared.pair_id, sum(shared.weight)::float8 AS neighbors
    FROM (SELECT a.pair_id, b.pair_id AS other, max(sw.specificity) AS weight
          FROM candidate_subjects a
          JOIN candidate_subjects b ON b.subject_id = a.subject_id AND b.pair_id <> a.pair_id
          JOIN subject_weights sw ON sw.subject_id = a.subject_id
          GROUP BY a.pair_id, b.pair_id) shared
    GROUP BY shared.pair_id
),
raw_signals AS (
    SELECT c.*,
           extract(epoch FROM c.occurred_at)::float8 AS occurred_epoch,
           coalesce(pss.subject_links, 0) AS subject_links,
           pss.best_subject_similarity,
           coalesce(nc.neighbors, 0) AS neighbors
    FROM candidates c
    LEFT JOIN pair_subject_scores pss ON pss.pair_id = c.id
    LEFT JOIN neighbor_counts nc ON nc.pair_id = c.id
),
signals AS (
    SELECT r.*,
           least(greatest(r.similarity, 0), 1) AS cos,
           CASE WHEN max(r.occurred_epoch) OVER () = min(r.occurred_epoch) OVER () THEN 1.0::float8
                ELSE (r.occurred_epoch - min(r.occurred_epoch) OVER ())
                     / (max(r.occurred_epoch) OVER () - min(r.occurred_epoch) OVER ()) END AS rec_lin,
           -- At most 1,000 half-lives (~38 years; 0.5^1000 ≈ 1e-301): older pairs would underflow float8.
           power(0.5, least(greatest(extract(epoch FROM (%(reference_time)s::timestamptz - r.occurred_at))::float8, 0)
                            / 86400.0 / 14.0, 1000.0)) AS rec_exp,
           coalesce(r.subject_links / nullif(max(r.subject_links) OVER (), 0), 0) AS subj_freq,
           least(greatest(coalesce(r.best_subject_similarity, 0), 0), 1) AS subj_sem,
           CASE WHEN r.session_id = %(session_id)s::text THEN 1::float8 ELSE 0::float8 END AS sess,
           coalesce(r.neighbors / nullif(max(r.neighbors) OVER (), 0), 0) AS neighbor_density,
           coalesce(r.bm25 / nullif(max(r.bm25) OVER (), 0), 0) AS lex
    FROM raw_signals r
),
remembered AS (
    -- The user's last-query time is an input of the next query's ranking; only real recalls count.
    INSERT INTO recall_profiles AS rp (user_id, kg_id, last_query_at, query_count)
    SELECT %(user_id)s, %(kg_id)s, clock_timestamp(), 1
    WHERE %(remember_query)s AND EXISTS (SELECT 1 FROM candidates)
    ON CONFLICT (user_id, kg_id)
    DO UPDATE SET last_query_at = EXCLUDED.last_query_at, query_count = rp.query_count + 1
)
SELECT id, session_id, turn_index, occurred_at, user_message, assistant_message, metadata, content_hash,
       in_vector_pool, in_lexical_pool, in_graph_pool, similarity, bm25,
       cos, rec_lin, rec_exp, subj_freq, subj_sem, sess, neighbor_density, lex,
       %(scale)s::float8 * (
             (%(weights)s::float8[])[1] * cos
           + (%(weights)s::float8[])[2] * rec_lin
           + (%(weights)s::float8[])[3] * rec_exp
           + (%(weights)s::float8[])[4] * subj_freq
           + (%(weights)s::float8[])[5] * subj_sem
           + (%(weights)s::float8[])[6] * sess
           + (%(weights)s::float8[])[7] * neighbor_density
           + (%(weights)s::float8[])[8] * lex) AS score
FROM signals
ORDER BY score DESC, similarity DESC, id
LIMIT %(row_limit)s;
