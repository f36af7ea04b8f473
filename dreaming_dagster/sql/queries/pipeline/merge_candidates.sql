-- Everything the merge of one batch needs from the graph, in one statement (the decisions are made in
-- Python: pipeline/merging.plan_batch_merge). One row a fact, told apart by "kind":
--   nearest    the user's live subjects at or above the threshold from each of the batch's names, the 5
--              most similar a name (the reference's merge query, for every name at once);
--   between    pairs of the batch's names at or above the threshold (a name with itself included), so a
--              subject created earlier in the batch is a candidate for a later name, by Postgres' cosine;
--   same_name  the live subject whose text is exactly a name (the exact-string guard's unique index);
--   live       which of the subject ids the pairs already carry are live (a retried pair reuses them).
-- The user's subjects are scanned exactly, never through the shared HNSW index, whose filtered search can
-- miss close subjects when many users share it.
WITH batch AS MATERIALIZED (
    SELECT name, embedding
    FROM unnest(%(names)s::text[], %(embeddings)s::vector[]) AS b(name, embedding)
),
-- One pass over the user's live subjects, each compared with every name of the batch, each distance
-- computed once (OFFSET 0 keeps the planner from copying the expression into the filter and the ranking).
-- No ORDER BY … LIMIT over a distance, so the HNSW index is not a path. (Materialising the subjects first,
-- as before, spilled a heavy user's 5 MB of vectors to disk and read them back once a name: 16 ms vs 8.5
-- for three names against 3,277 subjects.)
near AS (
    SELECT scored.name, scored.id, scored.subject_text, scored.description_text, 1 - scored.distance AS similarity,
           row_number() OVER (PARTITION BY scored.name ORDER BY scored.distance, scored.id) AS rank
    FROM (SELECT b.name, s.id, s.subject_text, s.description_text, s.embedding <=> b.embedding AS distance
          FROM subjects s
          CROSS JOIN batch b
          WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
            AND s.embedding IS NOT NULL
          OFFSET 0) scored
    WHERE 1 - scored.distance >= %(threshold)s
)
SELECT 'nearest' AS kind, name, NULL::text AS other_name, id AS subject_id, subject_text, description_text,
       similarity
FROM near WHERE rank <= 5
UNION ALL
SELECT 'between', pairs.name, pairs.other_name, NULL, NULL, NULL, 1 - pairs.distance
FROM (SELECT a.name, b.name AS other_name, a.embedding <=> b.embedding AS distance
      FROM batch a CROSS JOIN batch b
      OFFSET 0) pairs
WHERE 1 - pairs.distance >= %(threshold)s
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
