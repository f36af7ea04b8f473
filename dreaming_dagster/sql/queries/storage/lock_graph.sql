-- Wait for, then hold, the session advisory lock of one user's graph (storage/user_graphs.user_graph_lock).
-- Parameters: user_id, kg_id.
SELECT pg_advisory_lock(graph_lock_key(%(user_id)s, %(kg_id)s));
