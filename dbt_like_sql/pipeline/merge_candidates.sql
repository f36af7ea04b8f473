-- Everything the merge of one batch needs from the graph, in one statement (the decisions are made in
-- Python: pipeline/merging.plan_batch_merge). One row a fact, told apart by "kind":
--   nearest    the user's live subjects at or above the threshold from each of the batch's names, the 5
--              most similar a name (the reference's merge query, for every name at once);
--   between    pairs of the batch's names at or above the threshold (a name with itself included), so a
--              subject created earlier in the batch is a candidate for a later name, by Postgres' cosine;
--   same_name  the live subject whose text is exactly a name (the exact-string guard's unique index);
--   live       which of the subject ids the pairs already carry are live (a retried pair reuses them).
-- The user's subjects are scanned exactly (MATERIALIZED keeps the planner off the shared HNSW index,
-- whose filtered search can miss close subjects when many users share it).
WITH batch AS MATERIALIZED (
    SELECT name, embedding
    FROM unnest(%(names)s::text[], %(embeddings)s::vector[]) AS b(name, embedding)
),
mine AS MATERIALIZED (
    SELECT id, subject_text, description_text, embedding
    FROM subjects
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL AND embedding IS NOT NULL
),
near AS (
    SELECT b.name, m.id, m.subject_text, m.description_text, 1 - (m.embedding <=> b.embedding) AS similarity,
           row_number() OVER (PARTITION BY b.name ORDER BY m.embedding <=> b.embedding, m.id) AS rank
    FROM batch b CROSS JOIN mine m
    WHERE 1 - (m.embedding <=> b.embedding) >= %(threshold)s
)
SELECT 'nearest' AS kind, name, NULL::text AS other_name, id AS subject_id, subject_text, description_text,
       similarity
FROM near WHERE rank <= 5
UNION ALL
SELECT 'between', a.name, b.name, NULL, NULL, NULL, 1 - (a.embedding <=> b.embedding)
FROM batch a CROSS JOIN batch b
WHERE 1 - (a.embedding <=> b.embedding) >= %(threshold)s
UNION ALL
SELECT 'same_name', b.name, NULL, s.id, s.subject_text, s.description_text, NULL
FROM batch b
JOIN subjects s ON s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
               AND md5(s.subject_text) = md5(b.name) AND s.subject_text = b.name
UNION ALL
SELECT 'live', NULL, NULL, s.id, NULL, NULL, NULL
FROM subjects s
WHERE s.id = ANY(%(subject_ids)s::uuid[]) AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.archived_at IS NULL;
