-- Keep the keys' vectors in their rows, as migration 0021 does for the pairs' and subjects': a key row (its
-- text, words and a 384-d vector) passes ~2 kB, and pgvector's STORAGE external then moves the vector to the
-- TOAST table, one more lookup for every key recall reads — and the key side's exact fallback (a user owning
-- a small share of the keys' HNSW index) reads all of the user's. Rows written from now on are inline;
-- existing rows move when the table is rewritten (VACUUM FULL memory_keys, or pg_repack; docs/deploy.md).
ALTER TABLE memory_keys ALTER COLUMN embedding SET STORAGE MAIN;
