-- The declared type of an existing staging column (e.g. 'vector(1536)'), or no row.
SELECT format_type(atttypid, atttypmod) AS column_type
FROM pg_attribute
WHERE attrelid = 'memory_pairs'::regclass AND attname = 'embedding_next' AND NOT attisdropped;
