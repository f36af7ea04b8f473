-- The user's lock on their word-index statistics (lexical_index_apply's bucket, migrations 0017 and 0029) for
-- the rest of the transaction: a save indexing the user's words waits for the erasure instead of interleaving.
SELECT pg_advisory_xact_lock(word_index_lock_class(), word_index_lock_bucket(%(user_id)s, %(kg_id)s));
