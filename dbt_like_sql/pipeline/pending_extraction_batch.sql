-- Stage 2 input: pairs not yet extracted, oldest first (first mention wins the canonical name later).
-- A pair that failed max_attempts times is parked: tried again once per cool-down (an outage must not
-- abandon pairs for good), never in a tight loop.
SELECT id, user_message, assistant_message, attempts
FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
  AND extracted_at IS NULL
  AND (attempts < %(max_attempts)s OR last_attempt_at IS NULL
       OR last_attempt_at < now() - make_interval(secs => %(cooldown_seconds)s))
  AND NOT (id = ANY(%(skip_ids)s::uuid[]))  -- failed earlier in this run
ORDER BY occurred_at, turn_index NULLS LAST, id
LIMIT %(limit)s;
