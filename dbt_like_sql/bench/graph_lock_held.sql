-- Whether someone holds the graph lock of (user, kg): pipeline/stages.user_graph_lock's advisory key, split
-- into pg_locks' two 32-bit halves.
WITH k AS (SELECT hashtextextended('dreaming-graph' || chr(31) || %(user_id)s || chr(31) || %(kg_id)s, 0) AS key)
SELECT count(*) > 0 AS held
FROM pg_locks, k
WHERE locktype = 'advisory' AND granted
  AND classid::bigint = (key >> 32) & 4294967295 AND objid::bigint = key & 4294967295;
