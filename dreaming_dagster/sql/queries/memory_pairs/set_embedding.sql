-- Fill a pair's pending vectors (both turns, together). The user and graph guard keeps a batch from ever
-- touching another user's or tenant's rows; the pending condition makes a retried batch a no-op.
UPDATE memory_pairs
SET embedding = %(embedding)s, reply_embedding = %(reply_embedding)s
WHERE id = %(id)s
  AND user_id = %(user_id)s
  AND kg_id = ANY(%(kg_ids)s::text[])
  AND (embedding IS NULL
       OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> ''));
