-- The next batch of a user's pairs in the graphs kg_ids still waiting for their vectors (oldest first): no embedding yet, or
-- a reply vector missing although both turns have text (pairs embedded whole before migration 0009).
-- Leaves out the ones this run already failed on so one bad pair cannot block the rest.
SELECT id, user_message, assistant_message
FROM memory_pairs
WHERE user_id = %(user_id)s
  AND kg_id = ANY(%(kg_ids)s::text[])
  AND (embedding IS NULL
       OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> ''))
  AND NOT (id = ANY(%(skip_ids)s::uuid[]))
ORDER BY occurred_at, id
LIMIT %(limit)s;
