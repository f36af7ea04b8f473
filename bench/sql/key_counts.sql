-- The index keys of the benchmark memories (bench/longmemeval.py): pairs, pairs with a key and keys, by memory.
WITH pairs AS (
    SELECT p.id, CASE WHEN p.user_id = %(oracle_user)s THEN 'oracle'
                      WHEN p.user_id LIKE %(haystack_users)s THEN 's'
                      WHEN p.user_id LIKE %(locomo_users)s THEN 'locomo' ELSE 'realmem' END AS memory
    FROM memory_pairs p
    WHERE p.kg_id = %(kg_id)s
      AND (p.user_id = %(oracle_user)s OR p.user_id LIKE %(haystack_users)s OR p.user_id LIKE %(locomo_users)s
           OR p.user_id LIKE %(realmem_users)s)
), keyed AS (
    SELECT k.pair_id, count(*) AS keys
    FROM memory_keys k
    JOIN pairs ON pairs.id = k.pair_id
    GROUP BY k.pair_id
)
SELECT pairs.memory, count(*) AS pairs, count(keyed.pair_id) AS pairs_with_keys,
       coalesce(sum(keyed.keys), 0)::bigint AS keys
FROM pairs
LEFT JOIN keyed ON keyed.pair_id = pairs.id
GROUP BY pairs.memory
ORDER BY pairs.memory;
