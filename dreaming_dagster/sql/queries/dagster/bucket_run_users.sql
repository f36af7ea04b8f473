SELECT user_id FROM bucket_run_users WHERE run_id = %(run_id)s ORDER BY user_id;
