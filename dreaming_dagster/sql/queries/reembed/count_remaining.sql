SELECT (SELECT count(*) FROM memory_pairs WHERE embedding_next IS NULL) AS pairs,
       (SELECT count(*) FROM subjects WHERE embedding_next IS NULL)     AS subjects,
       (SELECT count(*) FROM memory_keys WHERE embedding IS NOT NULL AND embedding_next IS NULL) AS keys;
