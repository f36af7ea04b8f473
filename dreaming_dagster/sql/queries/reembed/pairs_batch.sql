SELECT id, user_message, assistant_message
FROM memory_pairs
WHERE embedding_next IS NULL
ORDER BY id
LIMIT %(limit)s;
