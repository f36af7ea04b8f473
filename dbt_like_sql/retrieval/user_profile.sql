-- The ranker's per-user inputs, read before ranking (only when a trained model is loaded): how much
-- memory the user has and since when, when they last asked, how far the query is from what they usually
-- talk about (the mean embedding of their live subjects), and the size of the caller's session.
-- Every figure respects as_of, so a historical query sees the memory as it was then.
SELECT
    (SELECT count(*) FROM memory_pairs
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
        AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)) AS memory_count,
    (SELECT min(occurred_at) FROM memory_pairs
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS first_memory_at,
    (SELECT last_query_at FROM recall_state
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS last_query_at,
    (SELECT count(*) FROM subjects
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL) AS subject_count,
    (SELECT 1 - (avg(embedding) <=> %(query)s) FROM subjects
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL
        AND embedding IS NOT NULL) AS mean_subject_similarity,
    (SELECT count(*) FROM memory_pairs
      WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND session_id = %(session_id)s::text
        AND (%(as_of)s::timestamptz IS NULL OR occurred_at < %(as_of)s::timestamptz)) AS session_pair_count;
