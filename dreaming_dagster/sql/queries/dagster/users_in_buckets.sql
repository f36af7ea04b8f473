-- Every user with memory in the given buckets (a rebuild's users); not the ranker's training memory.
SELECT DISTINCT user_id FROM memory_counts
WHERE user_bucket(user_id, %(buckets)s) = ANY(%(indices)s::int[]) AND kg_id <> %(training_kg)s
ORDER BY user_id;
