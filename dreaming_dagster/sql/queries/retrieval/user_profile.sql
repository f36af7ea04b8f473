-- The ranker's per-user inputs, read before ranking (only when a trained model is loaded): how much
-- memory the user has and since when, when they last asked, how far the query is from what they usually
-- talk about (the mean embedding of their live subjects), and the size of the caller's session.
-- Counts and the centroid come from recall_profiles (refreshed by dreaming) when it has them; for a user
-- never dreamed the counts are the live ones kept in memory_counts (migration 0024) and the centroid is
-- computed; a historical query (as_of) counts the pairs before it. CASE/COALESCE evaluate a subquery only
-- when its branch is taken, so the live path costs nothing when the cached one answers.
WITH cached AS (
    SELECT last_query_at, memory_count, subject_count, subject_centroid, refreshed_at
    FROM recall_profiles
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
)
SELECT
    CASE WHEN %(as_of)s::timestamptz IS NULL AND (SELECT memory_count FROM cached) IS NOT NULL
         THEN (SELECT memory_count FROM cached)
         WHEN %(as_of)s::timestamptz IS NULL
         THEN coalesce((SELECT pair_count FROM memory_counts WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s), 0)
         ELSE (SELECT count(*) FROM memory_pairs
                WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND occurred_at < %(as_of)s::timestamptz) END
        AS memory_count,
    (SELECT min(occurred_at) FROM memory_pairs
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS first_memory_at,
    (SELECT last_query_at FROM cached) AS last_query_at,
    coalesce((SELECT subject_count FROM cached),
             (SELECT live_subject_count FROM memory_counts WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s),
             0) AS subject_count,
    CASE WHEN (SELECT refreshed_at FROM cached) IS NOT NULL
         THEN 1 - ((SELECT subject_centroid FROM cached) <=> %(query)s)
         ELSE (SELECT 1 - (avg(embedding) <=> %(query)s) FROM subjects
                WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL
                  AND embedding IS NOT NULL) END AS mean_subject_similarity,
    (SELECT count(*) FROM memory_pairs
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND session_id = %(session_id)s::text
        AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)) AS session_pair_count;
