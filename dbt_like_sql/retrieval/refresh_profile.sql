-- Refresh a user's retrieval profile after dreaming changed the graph: pair and live-subject counts and
-- the mean live-subject embedding (the ranker's "drift" reference). last_query_at is left alone.
INSERT INTO recall_profiles AS rp (user_id, kg_id, memory_count, subject_count, subject_centroid, refreshed_at)
SELECT %(user_id)s, %(kg_id)s,
       (SELECT count(*) FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s),
       (SELECT count(*) FROM subjects
         WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL),
       (SELECT avg(embedding) FROM subjects
         WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL AND embedding IS NOT NULL),
       now()
ON CONFLICT (user_id, kg_id) DO UPDATE
SET memory_count = EXCLUDED.memory_count, subject_count = EXCLUDED.subject_count,
    subject_centroid = EXCLUDED.subject_centroid, refreshed_at = EXCLUDED.refreshed_at;
