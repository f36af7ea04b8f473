-- Retrieval: the user's candidate pool and the seven ranking signals, scored and ordered, in one
-- statement. Serving (recall) and training read these same rows, so they can never disagree.
--
-- Parameters: user_id, kg_id, query (vector), pool_size, as_of (timestamptz or NULL: only pairs that
-- happened before it), reference_time (the "now" of rec_exp: as_of or the wall clock), session_id (the
-- caller's session or NULL), weights (float8[7], in signal order), scale, row_limit, remember_query.
--
-- Pool: the top pool_size pairs by cosine. The first CTE lets the planner use the HNSW index (it needs
-- hnsw.ef_search >= pool_size, set by the recall connection). pgvector 0.6 filters an HNSW scan after the
-- fact, so when the user owns a small share of a large index the scan can come back short; then, and only
-- then (a one-time filter, never executed otherwise), the user's pairs are scanned exactly.
WITH approximate AS MATERIALIZED (
    SELECT id, embedding <=> %(query)s AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
      AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)
    ORDER BY embedding <=> %(query)s
    LIMIT %(pool_size)s
),
exact AS MATERIALIZED (
    -- MATERIALIZED keeps the planner from turning this into an (approximate) index scan again.
    SELECT id, embedding <=> %(query)s AS distance
    FROM memory_pairs
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND embedding IS NOT NULL
      AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)
),
pool AS (
    SELECT id, distance FROM approximate
    WHERE (SELECT count(*) FROM approximate) >= %(pool_size)s
    UNION ALL
    (SELECT id, distance FROM exact
     WHERE (SELECT count(*) FROM approximate) < %(pool_size)s
     ORDER BY distance, id
     LIMIT %(pool_size)s)
),
candidates AS (
    SELECT p.id, p.session_id, p.turn_index, p.occurred_at, p.user_message, p.assistant_message,
           p.metadata, 1 - pool.distance AS similarity
    FROM pool
    JOIN memory_pairs p ON p.id = pool.id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
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
-- above) and a link always carries its subject's user (graph/insert_links), so no user filter is needed
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
pair_subject_scores AS MATERIALIZED (
    SELECT cs.pair_id,
           sum(coalesce(slc.link_count, 0))::float8 AS subject_links,
           max(cs.subject_similarity) AS best_subject_similarity
    FROM candidate_subjects cs
    LEFT JOIN subject_link_counts slc USING (subject_id)
    GROUP BY cs.pair_id
),
-- Candidates sharing at least one subject with each candidate (itself excluded).
neighbor_counts AS MATERIALIZED (
    SELECT a.pair_id, count(DISTINCT b.pair_id)::float8 AS neighbors
    FROM candidate_subjects a
    JOIN candidate_subjects b ON b.subject_id = a.subject_id AND b.pair_id <> a.pair_id
    GROUP BY a.pair_id
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
           power(0.5, greatest(extract(epoch FROM (%(reference_time)s::timestamptz - r.occurred_at))::float8, 0)
                      / 86400.0 / 14.0) AS rec_exp,
           coalesce(r.subject_links / nullif(max(r.subject_links) OVER (), 0), 0) AS subj_freq,
           least(greatest(coalesce(r.best_subject_similarity, 0), 0), 1) AS subj_sem,
           CASE WHEN r.session_id = %(session_id)s::text THEN 1::float8 ELSE 0::float8 END AS sess,
           coalesce(r.neighbors / nullif(max(r.neighbors) OVER (), 0), 0) AS neighbor_density
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
SELECT id, session_id, turn_index, occurred_at, user_message, assistant_message, metadata,
       similarity, cos, rec_lin, rec_exp, subj_freq, subj_sem, sess, neighbor_density,
       %(scale)s::float8 * (
             (%(weights)s::float8[])[1] * cos
           + (%(weights)s::float8[])[2] * rec_lin
           + (%(weights)s::float8[])[3] * rec_exp
           + (%(weights)s::float8[])[4] * subj_freq
           + (%(weights)s::float8[])[5] * subj_sem
           + (%(weights)s::float8[])[6] * sess
           + (%(weights)s::float8[])[7] * neighbor_density) AS score
FROM signals
ORDER BY score DESC, similarity DESC, id
LIMIT %(row_limit)s;
