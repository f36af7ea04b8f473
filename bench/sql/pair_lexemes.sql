-- Every pair of a user as Postgres' english lexemes with their positions (bench/lexical.py's BM25 uses the
-- very tokenization full-text search uses, so only the scoring differs).
SELECT d.content_hash, (unnest(d.document)).*
FROM bench_pair_documents d
WHERE d.user_id = %(user_id)s;
