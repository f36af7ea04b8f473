-- After an erasure: the graph's counts row, unless a save that raced the erasure left a pair.
DELETE FROM memory_counts m
WHERE m.user_id = %(user_id)s AND m.kg_id = %(kg_id)s
  AND NOT EXISTS (SELECT 1 FROM memory_pairs p WHERE p.user_id = m.user_id AND p.kg_id = m.kg_id);
