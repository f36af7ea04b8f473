-- Benchmark setup: synthetic users and pairs for the sensor benchmark; every pending_every-th user has
-- one pair waiting at every stage, the others are fully dreamed (both vectors and every checkpoint set:
-- a schema change that adds a stage must add it here too, or every user counts as pending — the
-- benchmark asserts the count). The checkpoints are pair_stages' (migration 0019), written here for the
-- pairs this statement inserts; the insert trigger then has nothing left to add.
WITH inserted AS (
    INSERT INTO memory_pairs (user_id, kg_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                              token_count, content_hash, embedding, reply_embedding)
    SELECT 'user-' || u, 'default', 's-' || u, p, 'synthetic user message ' || p, 'synthetic reply',
           now() - (p || ' minutes')::interval, 8, md5(u || ':' || p),
           CASE WHEN u %% %(pending_every)s = 0 AND p = 0 THEN NULL
                ELSE array_fill(0.05::real, ARRAY[%(dimension)s])::vector END,
           CASE WHEN u %% %(pending_every)s = 0 AND p = 0 THEN NULL
                ELSE array_fill(0.05::real, ARRAY[%(dimension)s])::vector END
    FROM generate_series(%(first_user)s::int, %(users)s::int) AS u, generate_series(0, %(pairs_per_user)s - 1) AS p
    RETURNING id, user_id, kg_id, turn_index
)
INSERT INTO pair_stages (pair_id, user_id, kg_id, extracted_at, subjects_merged_at, kg_stored_at, keyed_at)
SELECT id, user_id, kg_id, dreamed_at, dreamed_at, dreamed_at, dreamed_at
FROM (SELECT id, user_id, kg_id,
             CASE WHEN substr(user_id, 6)::bigint %% %(pending_every)s = 0 AND turn_index = 0 THEN NULL
                  ELSE now() END AS dreamed_at
      FROM inserted) AS marked;
