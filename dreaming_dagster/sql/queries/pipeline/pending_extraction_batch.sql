-- Stage 2 input: pairs not yet extracted, oldest first (first mention wins the canonical name later).
-- A pair that failed max_attempts times is parked: tried again once per cool-down (an outage must not
-- abandon pairs for good), never in a tight loop. Progress is pair_stages' (migration 0019).
SELECT p.id, p.user_message, p.assistant_message, p.occurred_at, s.attempts
FROM pair_stages s
JOIN memory_pairs p ON p.id = s.pair_id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.extracted_at IS NULL
  AND (s.attempts < %(max_attempts)s OR s.last_attempt_at IS NULL
       OR s.last_attempt_at < now() - make_interval(secs => %(cooldown_seconds)s))
  AND NOT (s.pair_id = ANY(%(skip_ids)s::uuid[]))  -- failed earlier in this run
ORDER BY p.occurred_at, p.turn_index NULLS LAST, p.id
LIMIT %(limit)s;
