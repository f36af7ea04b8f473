-- Retrieval: a user's candidate pool and the twelve ranking signals, scored and ordered, in one statement.
-- Serving (recall) and training read these same rows, so they can never disagree. It reads in four parts:
--   1. inputs: the question's words and the user's corpus statistics;
--   2. the pool: the vector, lexical, graph, key and time-window sides, each a few named steps;
--   3. the signals of every candidate;
--   4. the score: the weighted sum, best first (and the query remembered for rec_exp).
--
-- Parameters: user_id, kg_id, query (vector), query_text, pool_size (vector candidates), lexical_pool_size
-- (BM25 candidates; 0 for a vector-only pool), lexical_pool_pairs (bigint[]: the pair numbers of the BM25
-- top lexical_pool_size, ties at the cut included, found by retrieval/lexical_postings.py or by
-- exact_lexical_top_k.sql), bm25_k1, bm25_b, as_of (timestamptz or NULL: only pairs that happened before it),
-- reference_time (the "now" of rec_exp: as_of or the wall clock), session_id (the caller's session or NULL),
-- weights (float8[12], in signal order), scale, row_limit, remember_query, hub_share and hub_min_pairs
-- (hubs.HubRule), graph_pool_size (graph candidates; 0: none), graph_subjects (the subjects nearest the query
-- the graph side starts from), key_pool_size (candidates drawn through their index keys; 0: none), and the question's time window (dates/questions.py): window_first and
-- window_last (dates, inclusive; NULL: the question names no time, and nothing below reads the window),
-- window_margin_days (its soft edge), window_certainty, window_pool_size (candidates drawn from inside it by
-- vector and by words, each; and for each side of a two-sided question), window_scan_limit (the most recent
-- in-window pairs those two read), and side_a, side_b (the embeddings of the two things an "A or B" question
-- compares, or NULL).
WITH
-- 1. Inputs ------------------------------------------------------------------------------------------------
-- The query's english lexemes (the graph side matches subject names by them).
query_terms AS MATERIALIZED (
    SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', %(query_text)s::text)) AS t
),
corpus AS MATERIALIZED (
    SELECT c.pair_count::float8 AS pair_count
    FROM lexical_corpora c
    WHERE c.user_id = %(user_id)s AND c.kg_id = %(kg_id)s AND c.pair_count > 0
),
-- The query's words in the user's vocabulary with their idf (question_words, migration 0029), as two parallel
-- arrays: the form pair_words_bm25 (migration 0018) scores a pair's forward row by. BM25's statistics are
-- the user's whole corpus, as_of or not; only the candidates are filtered by time.
query_words AS MATERIALIZED (
    SELECT array_agg(lexeme_id ORDER BY lexeme_id) AS lexeme_ids, array_agg(idf ORDER BY lexeme_id) AS idfs,
           min(average_length) AS average_length
    FROM question_words(%(user_id)s, %(kg_id)s, %(query_text)s::text)
),
-- 2. The pool ----------------------------------------------------------------------------------------------
-- The union of five sides, each candidate with every signal below.
-- Vector side: the top pool_size pairs by cosine. A pair has two vectors (migration 0009: its user turn and
-- its assistant turn) and its similarity is the better of the two. The top pool_size by that similarity is
-- always inside the union of the top pool_size of each vector, so two index scans and a cut give it. The
-- approximate CTEs let the planner use the HNSW indexes (they need hnsw.ef_search >= pool_size, set by the
-- recall connection). pgvector 0.6 filters an HNSW scan after the fact, so when the user owns a small share
-- of a large index the scan can come back short; then, and only then (a one-time filter, never executed
-- otherwise), the user's pairs are scanned exactly.
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
-- Lexical side: the pairs of lexical_pool_pairs, scored exactly from their pair_words rows and cut at
-- lexical_pool_size by score and id. They come from the user's own words; the candidates' join with
-- memory_pairs below is scoped by user all the same.
lexical_pool AS MATERIALIZED (
    SELECT w.pair_id AS id, scored.bm25
    FROM pair_words w
    CROSS JOIN query_words q
    CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                       q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
    WHERE w.pair_no = ANY(%(lexical_pool_pairs)s::bigint[]) AND %(lexical_pool_size)s > 0
      AND (%(as_of)s::timestamptz IS NULL OR w.occurred_at < %(as_of)s::timestamptz)
    ORDER BY scored.bm25 DESC, w.pair_id
    LIMIT %(lexical_pool_size)s
),
-- Graph side: pairs the vectors and the words both missed, reached through the user's
-- subjects nearest the query — by subject embedding (the graph_subjects nearest) and by subject-name words
-- (subjects whose name holds a query word) — never through a flagged hub. Each linked pair not already
-- drawn scores its best subject's similarity × specificity (hubs.py, over the whole corpus); the
-- best graph_pool_size are drawn.
-- The nearest subjects come from the subjects' HNSW index, as the vector pool's pairs do (the recall
-- connection's hnsw.ef_search is at least graph_subjects): ranked again by distance and id, and, when the
-- scan comes back short (pgvector 0.6 filters it after the fact: a user owning a small share of the
-- index), the user's live subjects are scanned exactly instead — a one-time filter, never run otherwise.
-- (An exact scan every time cost 27 ms for a user with 20,000 subjects.) The name match reads the
-- subjects' name-word index (migration 0020).
query_subjects_approximate AS MATERIALIZED (
    SELECT s.id, s.embedding <=> %(query)s AS distance
    FROM subjects s
    WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
      AND s.hub_since IS NULL AND s.embedding IS NOT NULL AND %(graph_pool_size)s > 0
    ORDER BY s.embedding <=> %(query)s
    LIMIT %(graph_subjects)s
),
query_subjects AS MATERIALIZED (
    SELECT nearest.id, nearest.similarity
    FROM ((SELECT a.id, 1 - a.distance AS similarity
           FROM query_subjects_approximate a
           WHERE (SELECT count(*) FROM query_subjects_approximate) >= %(graph_subjects)s
           ORDER BY a.distance, a.id)
          UNION ALL
          (SELECT s.id, 1 - (s.embedding <=> %(query)s) AS similarity
           FROM subjects s
           WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
             AND s.hub_since IS NULL AND s.embedding IS NOT NULL AND %(graph_pool_size)s > 0
             AND (SELECT count(*) FROM query_subjects_approximate) < %(graph_subjects)s
           ORDER BY s.embedding <=> %(query)s, s.id
           LIMIT %(graph_subjects)s)) nearest
    UNION
    SELECT named.id, named.similarity
    FROM (SELECT s.id, coalesce(1 - (s.embedding <=> %(query)s), 0) AS similarity
          FROM subjects s
          WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
            AND s.hub_since IS NULL AND %(graph_pool_size)s > 0
            AND to_tsvector('english'::regconfig, s.subject_text)
                @@ (SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery FROM query_terms)
          ORDER BY s.embedding <=> %(query)s, s.id
          LIMIT %(graph_subjects)s) named
),
graph_links AS MATERIALIZED (
    SELECT l.pair_id,
           max(qs.similarity * (1 - ln(greatest(counted.link_count, 1)) / ln(greatest(n.pairs, 2)))) AS weight
    FROM query_subjects qs
    CROSS JOIN (SELECT coalesce((SELECT pair_count FROM corpus), 0)::float8 AS pairs) n
    CROSS JOIN LATERAL (SELECT s.link_count FROM subjects s WHERE s.id = qs.id) counted
    JOIN subject_memory_pair_links l ON l.subject_id = qs.id
    GROUP BY l.pair_id
),
graph_pool AS MATERIALIZED (
    SELECT g.pair_id AS id
    FROM graph_links g
    JOIN memory_pairs p ON p.id = g.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
    WHERE (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM vector_pool v WHERE v.id = g.pair_id)
      AND NOT EXISTS (SELECT 1 FROM lexical_pool lp WHERE lp.id = g.pair_id)
    ORDER BY g.weight DESC, g.pair_id
    LIMIT %(graph_pool_size)s
),
-- Key side: pairs found through their index keys (migration 0030: what the user states about themselves,
-- the dated events of the user's turn) that the vectors, the words and the graph missed — the keys nearest
-- the query, each pair by its best key, the best key_pool_size pairs. The keys come from their HNSW index
-- (4 × key_pool_size of them: a pair can have several, and some pairs are drawn already) and, when the scan
-- comes back short (a user owning a small share of the index, or as_of), from the user's keys exactly.
key_nearest_approximate AS MATERIALIZED (
    SELECT k.pair_id, k.embedding <=> %(query)s AS distance
    FROM memory_keys k
    WHERE k.user_id = %(user_id)s AND k.kg_id = %(kg_id)s AND k.embedding IS NOT NULL AND %(key_pool_size)s > 0
      AND %(as_of)s::timestamptz IS NULL
    ORDER BY k.embedding <=> %(query)s
    LIMIT 4 * %(key_pool_size)s
),
key_nearest AS MATERIALIZED (
    SELECT a.pair_id, a.distance FROM key_nearest_approximate a
    WHERE (SELECT count(*) FROM key_nearest_approximate) >= 4 * %(key_pool_size)s
    UNION ALL
    (SELECT k.pair_id, k.embedding <=> %(query)s AS distance
     FROM memory_keys k
     WHERE k.user_id = %(user_id)s AND k.kg_id = %(kg_id)s AND k.embedding IS NOT NULL AND %(key_pool_size)s > 0
       -- The pair's time is read only for as_of: a key carries its pair's user and graph.
       AND (%(as_of)s::timestamptz IS NULL
            OR EXISTS (SELECT 1 FROM memory_pairs p
                       WHERE p.id = k.pair_id AND p.occurred_at < %(as_of)s::timestamptz))
       AND (SELECT count(*) FROM key_nearest_approximate) < 4 * %(key_pool_size)s
     ORDER BY k.embedding <=> %(query)s, k.pair_id
     LIMIT 4 * %(key_pool_size)s)
),
key_pool AS MATERIALIZED (
    SELECT n.pair_id AS id
    FROM key_nearest n
    JOIN memory_pairs p ON p.id = n.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
    WHERE NOT EXISTS (SELECT 1 FROM vector_pool v WHERE v.id = n.pair_id)
      AND NOT EXISTS (SELECT 1 FROM lexical_pool lp WHERE lp.id = n.pair_id)
      AND NOT EXISTS (SELECT 1 FROM graph_pool g WHERE g.id = n.pair_id)
    GROUP BY n.pair_id
    ORDER BY min(n.distance), n.pair_id
    LIMIT %(key_pool_size)s
),
-- Time-window side: when the question names a time, the pairs said inside the window or mentioning a time
-- that overlaps it (pair_times, migration 0026), then those said on its soft edges, each most recent first,
-- window_scan_limit in all; of those, the window_pool_size nearest the query and the window_pool_size
-- best by BM25 that no other side drew. So a pair from "last month" outside the global top-50 is still a
-- candidate; time_fit below ranks it. Never a filter: the other sides draw as before. A two-sided question
-- ("which did I do first, A or B?") also draws the window_pool_size pairs nearest each side (the HNSW
-- index), so both halves of the answer are candidates. Each pair's distance to the query is computed where
-- its row is read, once.
window_said AS MATERIALIZED (
    -- The pairs' (user, graph, time) index read backwards, cut at the limit.
    SELECT p.id, p.occurred_at, least(p.embedding <=> %(query)s, p.reply_embedding <=> %(query)s) AS distance
    FROM memory_pairs p
    WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND %(window_first)s::date IS NOT NULL
      AND p.occurred_at >= %(window_first)s::date::timestamp AT TIME ZONE 'UTC'
      AND p.occurred_at < (%(window_last)s::date + 1)::timestamp AT TIME ZONE 'UTC'
      AND (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
    ORDER BY p.occurred_at DESC, p.id
    LIMIT %(window_scan_limit)s
),
window_edges AS MATERIALIZED (
    -- The soft edges (window_margin_days on each side), read only as far as the window left room.
    SELECT e.id, e.occurred_at, e.distance
    FROM ((SELECT p.id, p.occurred_at, least(p.embedding <=> %(query)s, p.reply_embedding <=> %(query)s) AS distance
           FROM memory_pairs p
           WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND %(window_first)s::date IS NOT NULL
             AND p.occurred_at >= (%(window_last)s::date + 1)::timestamp AT TIME ZONE 'UTC'
             AND p.occurred_at < (%(window_last)s::date + 1 + ceil(%(window_margin_days)s)::integer)::timestamp AT TIME ZONE 'UTC'
             AND (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
           ORDER BY p.occurred_at DESC, p.id
           LIMIT greatest(%(window_scan_limit)s - (SELECT count(*) FROM window_said), 0))
          UNION ALL
          (SELECT p.id, p.occurred_at, least(p.embedding <=> %(query)s, p.reply_embedding <=> %(query)s) AS distance
           FROM memory_pairs p
           WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND %(window_first)s::date IS NOT NULL
             AND p.occurred_at >= (%(window_first)s::date - ceil(%(window_margin_days)s)::integer)::timestamp AT TIME ZONE 'UTC'
             AND p.occurred_at < %(window_first)s::date::timestamp AT TIME ZONE 'UTC'
             AND (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
           ORDER BY p.occurred_at DESC, p.id
           LIMIT greatest(%(window_scan_limit)s - (SELECT count(*) FROM window_said), 0))) e
),
window_mentioned AS MATERIALIZED (
    -- The times' index: pairs mentioning a time that overlaps the window or its edges.
    SELECT p.id, p.occurred_at, least(p.embedding <=> %(query)s, p.reply_embedding <=> %(query)s) AS distance
    FROM pair_times t
    JOIN memory_pairs p ON p.id = t.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
    WHERE t.user_id = %(user_id)s AND t.kg_id = %(kg_id)s AND %(window_first)s::date IS NOT NULL
      AND t.last_day >= %(window_first)s::date - ceil(%(window_margin_days)s)::integer
      AND t.first_day <= %(window_last)s::date + ceil(%(window_margin_days)s)::integer
      AND (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
    ORDER BY p.occurred_at DESC, p.id
    LIMIT %(window_scan_limit)s
),
window_pairs AS MATERIALIZED (
    SELECT w.id, w.distance
    FROM (SELECT id, min(occurred_at) AS occurred_at, min(distance) AS distance, bool_or(inside) AS inside
          FROM (SELECT id, occurred_at, distance, true AS inside FROM window_said
                UNION ALL SELECT id, occurred_at, distance, true FROM window_mentioned
                UNION ALL SELECT id, occurred_at, distance, false FROM window_edges) AS read
          GROUP BY id) w
    ORDER BY w.inside DESC, w.occurred_at DESC, w.id
    LIMIT %(window_scan_limit)s
),
window_drawn AS MATERIALIZED (
    (SELECT w.id
     FROM window_pairs w
     WHERE w.distance IS NOT NULL
     ORDER BY w.distance, w.id
     LIMIT %(window_pool_size)s)
    UNION
    (SELECT w.pair_id
     FROM window_pairs wp
     JOIN pair_words w ON w.pair_id = wp.id
     CROSS JOIN query_words q
     CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                        q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
     WHERE w.lexeme_ids && q.lexeme_ids AND scored.bm25 > 0
     ORDER BY scored.bm25 DESC, w.pair_id
     LIMIT %(window_pool_size)s)
    UNION
    (SELECT nearest.id
     FROM (VALUES (%(side_a)s::vector), (%(side_b)s::vector)) AS sides (side)
     CROSS JOIN LATERAL (SELECT p.id FROM memory_pairs p
                         WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.embedding IS NOT NULL
                           AND sides.side IS NOT NULL
                           AND (%(as_of)s::timestamptz IS NULL OR p.occurred_at < %(as_of)s::timestamptz)
                         ORDER BY p.embedding <=> sides.side
                         LIMIT %(window_pool_size)s) nearest)
),
window_pool AS MATERIALIZED (
    SELECT d.id FROM window_drawn d
    WHERE NOT EXISTS (SELECT 1 FROM vector_pool v WHERE v.id = d.id)
      AND NOT EXISTS (SELECT 1 FROM lexical_pool lp WHERE lp.id = d.id)
      AND NOT EXISTS (SELECT 1 FROM graph_pool g WHERE g.id = d.id)
      AND NOT EXISTS (SELECT 1 FROM key_pool kp WHERE kp.id = d.id)
),
pool AS (
    SELECT coalesce(v.id, l.id) AS id, v.id IS NOT NULL AS in_vector_pool, l.id IS NOT NULL AS in_lexical_pool,
           false AS in_graph_pool, false AS in_key_pool, false AS in_window_pool
    FROM vector_pool v
    FULL JOIN lexical_pool l ON l.id = v.id
    UNION ALL
    SELECT id, false, false, true, false, false FROM graph_pool
    UNION ALL
    SELECT id, false, false, false, true, false FROM key_pool
    UNION ALL
    SELECT id, false, false, false, false, true FROM window_pool
),
-- 3. The signals --------------------------------------------------------------------------------------------
-- Exact BM25 (the lex signal) of every pair the vector and graph sides drew, read from its pair_words row
-- (one primary-key fetch a pair); the lexical pool's pairs carry theirs.
exact_bm25 AS MATERIALIZED (
    SELECT lp.id, lp.bm25 FROM lexical_pool lp
    UNION ALL
    SELECT w.pair_id, scored.bm25
    FROM (SELECT id FROM vector_pool UNION SELECT id FROM graph_pool UNION SELECT id FROM key_pool
          UNION SELECT id FROM window_pool
          EXCEPT SELECT id FROM lexical_pool) AS drawn
    JOIN pair_words w ON w.pair_id = drawn.id
    CROSS JOIN query_words q
    CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.lexeme_ids, q.idfs,
                                       q.average_length, %(bm25_k1)s::float8, %(bm25_b)s::float8) scored
),
-- Similarity: the better of the pair's two vectors. A pair whose embedding is still pending (lexical
-- candidates can be) has similarity 0.
candidates AS MATERIALIZED (
    SELECT p.id, p.session_id, p.turn_index, p.occurred_at, p.user_message, p.assistant_message,
           p.metadata, p.content_hash, pool.in_vector_pool, pool.in_lexical_pool, pool.in_graph_pool,
           pool.in_key_pool, pool.in_window_pool,
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
    SELECT c.id AS pair_id, s.id AS subject_id, 1 - (s.embedding <=> %(query)s) AS subject_similarity,
           s.link_count
    FROM candidates c
    JOIN subject_memory_pair_links l
      ON l.pair_id = c.id AND l.user_id = %(user_id)s AND l.kg_id = %(kg_id)s
    JOIN subjects s
      ON s.id = l.subject_id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
),
-- How often each of those subjects comes up: its links over the user's whole memory, kept with the subject
-- (migration 0023: subjects.link_count, read from the row fetched above). As of a past time, only links to
-- pairs before it count: one index-only count per subject (LATERAL), never a scan of the user's links. The
-- subject ids are already this user's (checked against subjects.user_id above) and a link always carries
-- its subject's user (pipeline/insert_links), so no user filter is needed there, and leaving it out keeps
-- the count inside the primary-key index.
subject_link_counts AS MATERIALIZED (
    SELECT DISTINCT cs.subject_id, cs.link_count::bigint AS link_count
    FROM candidate_subjects cs
    WHERE %(as_of)s::timestamptz IS NULL
    UNION ALL
    SELECT ds.subject_id, counted.link_count
    FROM (SELECT DISTINCT subject_id FROM candidate_subjects WHERE %(as_of)s::timestamptz IS NOT NULL) ds
    CROSS JOIN LATERAL (
        SELECT count(*) AS link_count
        FROM subject_memory_pair_links l
        WHERE l.subject_id = ds.subject_id
          AND EXISTS (SELECT 1 FROM memory_pairs lp
                      WHERE lp.id = l.pair_id AND lp.occurred_at < %(as_of)s::timestamptz)
    ) counted
),
-- How specific each subject is (hubs.py): an IDF over the user's pairs scaled to [0, 1],
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
-- How well each candidate's times fit the question's window (range_fit, migration 0026): the best of its
-- own day (occurred_at, a UTC day) and the times its user turn mentions (each by its certainty), times the
-- window's certainty; and the best of the mentions alone (time_text). Read only when the question names a time.
time_fits AS MATERIALIZED (
    SELECT fits.pair_id, max(fits.fit) * %(window_certainty)s::float8 AS time_fit,
           coalesce(max(fits.fit) FILTER (WHERE fits.mentioned), 0) * %(window_certainty)s::float8 AS time_text
    FROM (SELECT c.id AS pair_id, false AS mentioned,
                 range_fit((c.occurred_at AT TIME ZONE 'UTC')::date, (c.occurred_at AT TIME ZONE 'UTC')::date,
                           granularity_margin_days('day'), %(window_first)s::date, %(window_last)s::date,
                           %(window_margin_days)s::float8) AS fit
          FROM candidates c
          WHERE %(window_first)s::date IS NOT NULL
          UNION ALL
          SELECT t.pair_id, true,
                 t.certainty * range_fit(t.first_day, t.last_day, granularity_margin_days(t.granularity),
                                         %(window_first)s::date, %(window_last)s::date,
                                         %(window_margin_days)s::float8)
          FROM candidates c
          JOIN pair_times t ON t.pair_id = c.id AND t.user_id = %(user_id)s AND t.kg_id = %(kg_id)s
          WHERE %(window_first)s::date IS NOT NULL) fits
    GROUP BY fits.pair_id
),
-- How well each candidate's index keys match the query: its best key's cosine (0 without keys).
key_matches AS MATERIALIZED (
    SELECT k.pair_id, max(1 - (k.embedding <=> %(query)s)) AS key_similarity
    FROM candidates c
    JOIN memory_keys k ON k.pair_id = c.id AND k.user_id = %(user_id)s AND k.kg_id = %(kg_id)s
    WHERE k.embedding IS NOT NULL
    GROUP BY k.pair_id
),
raw_signals AS (
    SELECT c.*,
           coalesce(km.key_similarity, 0) AS key_similarity,
           coalesce(tf.time_fit, 0) AS raw_time_fit,
           coalesce(tf.time_text, 0) AS raw_time_text,
           extract(epoch FROM c.occurred_at)::float8 AS occurred_epoch,
           coalesce(pss.subject_links, 0) AS subject_links,
           pss.best_subject_similarity,
           coalesce(nc.neighbors, 0) AS neighbors
    FROM candidates c
    LEFT JOIN pair_subject_scores pss ON pss.pair_id = c.id
    LEFT JOIN neighbor_counts nc ON nc.pair_id = c.id
    LEFT JOIN time_fits tf ON tf.pair_id = c.id
    LEFT JOIN key_matches km ON km.pair_id = c.id
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
           coalesce(r.bm25 / nullif(max(r.bm25) OVER (), 0), 0) AS lex,
           least(greatest(r.raw_time_fit, 0), 1) AS time_fit,
           least(greatest(r.key_similarity, 0), 1) AS key_match,
           -- The best cosine among the candidates of the pair's session (its own without a session).
           CASE WHEN r.session_id IS NULL THEN least(greatest(r.similarity, 0), 1)
                ELSE max(least(greatest(r.similarity, 0), 1)) OVER (PARTITION BY r.session_id) END AS session_match,
           least(greatest(r.raw_time_text, 0), 1) AS time_text
    FROM raw_signals r
),
-- 4. The score ---------------------------------------------------------------------------------------------
remembered AS (
    -- The user's last-query time is an input of the next query's ranking; only real recalls count.
    INSERT INTO recall_profiles AS rp (user_id, kg_id, last_query_at, query_count)
    SELECT %(user_id)s, %(kg_id)s, clock_timestamp(), 1
    WHERE %(remember_query)s AND EXISTS (SELECT 1 FROM candidates)
    ON CONFLICT (user_id, kg_id)
    DO UPDATE SET last_query_at = EXCLUDED.last_query_at, query_count = rp.query_count + 1
)
SELECT id, session_id, turn_index, occurred_at, user_message, assistant_message, metadata, content_hash,
       in_vector_pool, in_lexical_pool, in_graph_pool, in_key_pool, in_window_pool, similarity, bm25,
       cos, rec_lin, rec_exp, subj_freq, subj_sem, sess, neighbor_density, lex, time_fit, key_match,
       session_match, time_text,
       %(scale)s::float8 * (
             (%(weights)s::float8[])[1] * cos
           + (%(weights)s::float8[])[2] * rec_lin
           + (%(weights)s::float8[])[3] * rec_exp
           + (%(weights)s::float8[])[4] * subj_freq
           + (%(weights)s::float8[])[5] * subj_sem
           + (%(weights)s::float8[])[6] * sess
           + (%(weights)s::float8[])[7] * neighbor_density
           + (%(weights)s::float8[])[8] * lex
           + (%(weights)s::float8[])[9] * time_fit
           + (%(weights)s::float8[])[10] * key_match
           + (%(weights)s::float8[])[11] * session_match
           + (%(weights)s::float8[])[12] * time_text) AS score
FROM signals
ORDER BY score DESC, similarity DESC, id
LIMIT %(row_limit)s;
