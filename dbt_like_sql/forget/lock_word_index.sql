-- The user's lock on their word-index statistics (lexical_index_apply's bucket, migration 0011) for the rest
-- of the transaction: a save indexing the user's words waits for the erasure instead of interleaving.
SELECT pg_advisory_xact_lock(2042119937, (hashtextextended(%(user_id)s || '/' || %(kg_id)s, 0) & 255)::int);
