-- The reference's merge query: the user's top-5 live subjects by cosine, at or above the similarity
-- threshold, most similar first (distance ascending). The user's subjects are scanned exactly
-- (MATERIALIZED keeps the planner off the global HNSW index): a filtered HNSW search on pgvector 0.6
-- can miss close subjects when many users share the index, which would fragment the graph.
WITH mine AS MATERIALIZED (
    SELECT id, subject_text, description_text, subject_type, embedding <=> %(embedding)s AS distance
    FROM subjects
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
      AND archived_at IS NULL AND embedding IS NOT NULL
)
SELECT id, subject_text, description_text, subject_type, 1 - distance AS similarity
FROM mine
WHERE 1 - distance >= %(threshold)s
ORDER BY distance ASC
LIMIT 5;
