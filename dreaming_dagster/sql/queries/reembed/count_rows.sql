-- How many rows a re-embedding touches (for its progress bar).
SELECT (SELECT count(*) FROM memory_pairs) + (SELECT count(*) FROM subjects)
       + (SELECT count(embedding) FROM memory_keys) AS n;
