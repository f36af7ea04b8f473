-- A bucket run's users (pipeline/buckets.py); a retried first step adds only the users it lacks.
INSERT INTO bucket_run_users (run_id, user_id)
SELECT %(run_id)s, unnest(%(user_ids)s::text[])
ON CONFLICT DO NOTHING;
