-- Benchmark setup: fast-path syncs waiting for the sensor, one a user from the first, as sync_user records
-- them (every stage's counts).
INSERT INTO fast_path_syncs (user_id, kg_id, stages)
SELECT 'user-' || u, 'default',
       jsonb_build_object('memory_pairs', jsonb_build_object('embedded', 1),
                          'pair_dates', jsonb_build_object('pairs', 1),
                          'pair_keys', jsonb_build_object('pairs', 1, 'keys', 2),
                          'pair_subjects', jsonb_build_object('pairs', 1, 'subjects', 3),
                          'subjects', jsonb_build_object('created', 2, 'merged', 1),
                          'subject_links', jsonb_build_object('links', 3),
                          'refined_subjects', jsonb_build_object('refined', 0))
FROM generate_series(1, %(syncs)s) AS u;
