-- Keep the vectors in their rows (issue 18). pgvector declares its type STORAGE external, so once a row
-- passes ~2 kB — two 384-d vectors are 3,088 bytes on their own — both vectors of every pair went to the
-- TOAST table, each a separate tuple found through the TOAST index. Any read of a vector then cost ~3 extra
-- buffer visits: an exact scan of a 10,000-pair user (the vector pool's fallback when a filtered HNSW scan
-- comes back short, which pgvector 0.6 does for any user owning a small share of a shared index) touched
-- 72,689 buffers and took 41 ms, and every candidate the ranking statement scores detoasted two vectors.
-- MAIN keeps a value inline unless the row still exceeds a whole page after everything else has gone out of
-- line: the messages (EXTENDED) are compressed or moved out first, so a 384-d pair row is ~3.2 kB and two
-- fit a page; a wider model's pair (1536-d: 12.3 kB of vectors) still has one vector moved out, as before.
-- SET STORAGE changes no stored row: rows written from now on are inline. Existing rows move inline when
-- the table is rewritten (VACUUM FULL memory_pairs, subjects — it rebuilds the HNSW indexes and locks the
-- tables meanwhile — or pg_repack online); until then they are read exactly as before (docs/deploy.md).
ALTER TABLE memory_pairs ALTER COLUMN embedding SET STORAGE MAIN,
                         ALTER COLUMN reply_embedding SET STORAGE MAIN;
-- A subject's row is usually under the threshold already; a long refined narrative would push its vector
-- out, and the graph side's exact fallback scans subjects' vectors the same way.
ALTER TABLE subjects ALTER COLUMN embedding SET STORAGE MAIN;
