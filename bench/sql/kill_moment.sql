-- bench/reliability.py: is a sync of this user at a moment worth killing? "write" when one of the sync's
-- connections (application_name) is inside a transaction that has written (a stage's batch, not yet
-- committed); "between" when every pair is merged and none is linked yet (between two committed stages).
SELECT CASE
         WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                      WHERE application_name = %(application_name)s AND backend_xid IS NOT NULL)
           THEN 'inside a stage''s write transaction'
         WHEN (SELECT count(*) FILTER (WHERE subjects_merged_at IS NOT NULL) = count(*)
                      AND count(*) FILTER (WHERE kg_stored_at IS NOT NULL) = 0
               FROM pair_stages WHERE user_id = %(user_id)s)
           THEN 'between the merge and the link stage'
       END AS moment;
