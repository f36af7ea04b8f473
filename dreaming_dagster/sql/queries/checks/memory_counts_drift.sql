-- Graphs whose stored counts (memory_counts, kept by triggers: migration 0024) differ from a count of their
-- rows: must be none, ever (tests and bench/reliability.py, after kills and concurrent writers). user_id
-- NULL: every graph.
WITH graphs AS (
    SELECT user_id, kg_id FROM memory_pairs
    UNION SELECT user_id, kg_id FROM subjects
    UNION SELECT user_id, kg_id FROM memory_counts
),
counted AS (
    SELECT g.user_id, g.kg_id, coalesce(p.n, 0) AS pairs, coalesce(s.n, 0) AS live_subjects
    FROM graphs g
    LEFT JOIN (SELECT user_id, kg_id, count(*) AS n FROM memory_pairs GROUP BY user_id, kg_id) p
           USING (user_id, kg_id)
    LEFT JOIN (SELECT user_id, kg_id, count(*) AS n FROM subjects WHERE archived_at IS NULL
               GROUP BY user_id, kg_id) s USING (user_id, kg_id)
)
SELECT c.user_id, c.kg_id, c.pairs, c.live_subjects, coalesce(m.pair_count, 0) AS stored_pairs,
       coalesce(m.live_subject_count, 0) AS stored_live_subjects
FROM counted c
LEFT JOIN memory_counts m USING (user_id, kg_id)
WHERE (%(user_id)s::text IS NULL OR c.user_id = %(user_id)s)
  AND (c.pairs, c.live_subjects) IS DISTINCT FROM (coalesce(m.pair_count, 0), coalesce(m.live_subject_count, 0))
ORDER BY c.user_id, c.kg_id;
