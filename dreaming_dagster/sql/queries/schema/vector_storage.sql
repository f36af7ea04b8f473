-- How the vector columns are stored (pg_attribute.attstorage: 'm' MAIN, in line; 'e' EXTERNAL, pgvector's
-- default, out of line once a row passes ~2 kB). Migrations 0021 and 0033 and `dreaming reembed` keep them MAIN.
SELECT attrelid::regclass::text || '.' || attname AS name, attstorage
FROM pg_attribute
WHERE attrelid IN ('memory_pairs'::regclass, 'subjects'::regclass, 'memory_keys'::regclass)
  AND attname IN ('embedding', 'reply_embedding') AND NOT attisdropped
ORDER BY 1
