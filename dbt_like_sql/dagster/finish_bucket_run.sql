-- The run's list is done with; lists a dead run left behind go after a day.
DELETE FROM bucket_run_users WHERE run_id = %(run_id)s OR added_at < now() - interval '1 day';
