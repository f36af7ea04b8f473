-- Release the advisory lock of one user's graph taken by lock_graph.sql. Parameters: user_id, kg_id.
SELECT pg_advisory_unlock(graph_lock_key(%(user_id)s, %(kg_id)s));
