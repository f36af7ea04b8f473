-- The index keys of one pair of the user's graph (the keying stage's: migration 0030).
SELECT k.kind, k.position, k.key_text AS text, k.embedding IS NOT NULL AS embedded
FROM memory_keys k
WHERE k.user_id = %(user_id)s AND k.kg_id = %(kg_id)s AND k.pair_id = %(pair_id)s::uuid
ORDER BY k.kind, k.position;
