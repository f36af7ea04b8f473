DELETE FROM bucket_run_users WHERE user_id = %(user_id)s;
