-- Fill a pending embedding. The user_id guard keeps a batch from ever touching another user's rows;
-- "embedding IS NULL" makes a retried batch a no-op.
UPDATE memory_pairs
SET embedding = %(embedding)s
WHERE id = %(id)s
  AND user_id = %(user_id)s
  AND embedding IS NULL;
