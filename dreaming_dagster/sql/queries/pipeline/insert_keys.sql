-- A batch's keys (pipeline/keying.py), in the transaction that checkpoints it. A re-run writes the same keys:
-- nothing is duplicated. Only pairs of this user and graph get keys.
INSERT INTO memory_keys (pair_id, user_id, kg_id, kind, position, key_text, embedding)
SELECT k.pair_id, %(user_id)s, %(kg_id)s, k.kind, k.position, k.key_text, k.embedding
FROM unnest(%(pair_ids)s::uuid[], %(kinds)s::text[], %(positions)s::integer[], %(texts)s::text[],
            %(embeddings)s::vector[]) AS k(pair_id, kind, position, key_text, embedding)
JOIN memory_pairs p ON p.id = k.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
ON CONFLICT (pair_id, kind, position) DO NOTHING;
