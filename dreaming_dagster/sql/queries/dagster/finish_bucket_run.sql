-- The run's list is done with; lists a dead run left behind go after a day, never those of runs still
-- queued or running (live_run_ids: their root run ids, from Dagster).
DELETE FROM bucket_run_users
WHERE run_id = %(run_id)s
   OR (added_at < now() - interval '1 day' AND NOT run_id = ANY (%(live_run_ids)s::text[]));
