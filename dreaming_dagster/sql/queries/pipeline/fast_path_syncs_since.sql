-- Fast-path syncs not reported to Dagster yet (seq after the sensor's cursor), oldest first, with the
-- graph's counts now; not the ranker's training memory.
SELECT f.user_id, f.kg_id, f.seq, f.synced_at, f.stages, coalesce(m.pair_count, 0) AS user_pairs,
       coalesce(m.live_subject_count, 0) AS graph_subjects
FROM fast_path_syncs f
LEFT JOIN memory_counts m USING (user_id, kg_id)
WHERE f.seq > %(after)s AND f.kg_id <> %(training_kg)s
ORDER BY f.seq
LIMIT %(limit)s;
