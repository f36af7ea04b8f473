-- How many pairs an export of the user's graph holds (its header says it before the pairs stream).
SELECT count(*) AS pairs FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
