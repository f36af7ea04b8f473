-- Refresh a user's retrieval profile after dreaming changed the graph: pair and live-subject counts every
-- time (kept in memory_counts by triggers: migration 0024); the mean live-subject embedding (the ranker's
-- "drift" reference) when the profile has none yet or more than centroid_tolerance of the live subjects
-- changed since it was computed (subjects.vector_changed_at, indexed per user, moves when a subject's vector
-- or liveness changes: migration 0022). CASE evaluates a subquery only when its branch is taken.
-- last_query_at is left alone.
WITH profile AS (
    SELECT subject_centroid, centroid_at FROM recall_profiles
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
),
counts AS (
    SELECT coalesce(m.pair_count, 0) AS memory_count, coalesce(m.live_subject_count, 0) AS subject_count
    FROM (SELECT 1) AS one
    LEFT JOIN memory_counts m ON m.user_id = %(user_id)s AND m.kg_id = %(kg_id)s
),
decision AS (
    SELECT (SELECT centroid_at FROM profile) IS NULL
           OR (SELECT count(*) FROM subjects
                WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND vector_changed_at > (SELECT centroid_at FROM profile))
              > %(centroid_tolerance)s::float8 * (SELECT subject_count FROM counts) AS recompute
)
INSERT INTO recall_profiles AS rp (user_id, kg_id, memory_count, subject_count, subject_centroid, refreshed_at,
                                   centroid_at)
SELECT %(user_id)s, %(kg_id)s, counts.memory_count, counts.subject_count,
       CASE WHEN decision.recompute
            THEN (SELECT avg(embedding) FROM subjects
                   WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL AND embedding IS NOT NULL)
            ELSE (SELECT subject_centroid FROM profile) END,
       now(),
       CASE WHEN decision.recompute THEN now() ELSE (SELECT centroid_at FROM profile) END
FROM counts CROSS JOIN decision
ON CONFLICT (user_id, kg_id) DO UPDATE
SET memory_count = EXCLUDED.memory_count, subject_count = EXCLUDED.subject_count,
    subject_centroid = EXCLUDED.subject_centroid, refreshed_at = EXCLUDED.refreshed_at,
    centroid_at = EXCLUDED.centroid_at;
