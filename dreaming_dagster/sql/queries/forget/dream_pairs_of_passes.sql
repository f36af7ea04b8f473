-- The dreamer's memory pairs of the given passes (each written with its pass's start time): a pass that read
-- forgotten text may have retold it in its summary.
SELECT p.id, p.token_count
FROM memory_pairs p
JOIN dreaming_passes d ON d.user_id = p.user_id AND d.kg_id = p.kg_id AND d.started_at = p.occurred_at
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.session_id = %(dream_session)s
  AND d.id = ANY (%(pass_ids)s::uuid[]) AND NOT (p.id = ANY (%(pair_ids)s::uuid[]))
ORDER BY p.id
FOR UPDATE OF p;
