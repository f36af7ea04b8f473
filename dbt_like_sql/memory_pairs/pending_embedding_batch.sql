-- The next batch of a user's pairs still waiting for an embedding (oldest first), leaving out the ones
-- this run already failed on so one bad pair cannot block the rest.
SELECT id, user_message, assistant_message
FROM memory_pairs
WHERE user_id = %(user_id)s
  AND embedding IS NULL
  AND NOT (id = ANY(%(skip_ids)s::uuid[]))
ORDER BY occurred_at, id
LIMIT %(limit)s;
