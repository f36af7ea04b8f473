-- Erase, step 3 of 3: the graph's pairs (stages and dated events by foreign key; their words went in step 1).
WITH gone AS (
    DELETE FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s RETURNING id
)
SELECT count(*) AS pairs FROM gone;
