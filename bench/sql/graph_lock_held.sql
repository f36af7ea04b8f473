-- Whether someone holds the graph lock of (user, kg): graph_lock_key (migration 0029), split into pg_locks'
-- two 32-bit halves.
WITH k AS (SELECT graph_lock_key(%(user_id)s, %(kg_id)s) AS key)
SELECT count(*) > 0 AS held
FROM pg_locks, k
WHERE locktype = 'advisory' AND granted
  AND classid::bigint = (key >> 32) & 4294967295 AND objid::bigint = key & 4294967295;
