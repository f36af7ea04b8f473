-- Whether the database holds memory outside one graph (the benchmark memories' ranker-training graph): then
-- it serves users, and the memory encoder's re-embedding, which changes every vector, must not run on it.
-- Params: kg_id.
SELECT EXISTS (SELECT 1 FROM memory_pairs WHERE kg_id <> %(kg_id)s) AS outside;
