-- bench/reliability.py: how many of a user's pairs are past a stage (the moment to kill a sync mid-stage).
SELECT count(*) FILTER (WHERE CASE %(stage)s WHEN 'subjects_merged_at' THEN subjects_merged_at IS NOT NULL
                                             WHEN 'kg_stored_at' THEN kg_stored_at IS NOT NULL END) AS done,
       count(*) AS n
FROM memory_pairs
WHERE user_id = %(user_id)s;
