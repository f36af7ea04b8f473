-- Fill a pair's pending vectors (both turns, together). The user_id guard keeps a batch from ever touching
-- another user's rows; the pending condition makes a retried batch a no-op.
UPDATE memory_pairs
SET embedding = %(embedding)s, reply_embedding = %(reply_embedding)s
WHERE id = %(id)s
  AND user_id = %(user_id)s
  AND (embedding IS NULL
       OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> ''));
