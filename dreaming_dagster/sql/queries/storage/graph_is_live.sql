-- Whether the user's graph still holds anything (a pair or a subject): read under the graph lock by every
-- stage and pass, so work that was planned before an erasure took the lock writes nothing for the erased graph.
SELECT EXISTS (SELECT 1 FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s)
    OR EXISTS (SELECT 1 FROM subjects WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS live;
