-- The lexical index's bulk path without merge joins. The first large save into a fresh database (one
-- COPY or INSERT of 1,500 pairs for one user, before any statistics exist) took 192 s instead of 2.4 s:
-- planned from empty tables, lexical_index_apply merge-joined the batch's ~200,000 postings with its
-- per-user rows on (user_id, kg_id), a key with one value, and the merge join re-read its inner side for
-- every outer row (2.9 billion rows sorted). Hash joins are linear whatever the estimates; index nested
-- loops, which a one-pair save needs, stay allowed. A function's SET clause applies only while it runs.
-- (CREATE OR REPLACE of the function would drop it: tests/test_lexical.py checks it is there.)
ALTER FUNCTION lexical_index_apply(uuid[], integer) SET enable_mergejoin = off;
