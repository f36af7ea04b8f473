-- Of the given user ids (Dagster's users partitions), those holding no pair in any graph: erased, or every
-- pair forgotten.
SELECT u.user_id
FROM unnest(%(user_ids)s::text[]) AS u (user_id)
WHERE NOT EXISTS (SELECT 1 FROM memory_counts m WHERE m.user_id = u.user_id AND m.pair_count > 0)
ORDER BY u.user_id;
