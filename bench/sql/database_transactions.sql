-- Transactions a database has committed or rolled back so far (read from another database, so the reading
-- is not counted; a backend reports its own within 10 s of going idle).
SELECT xact_commit + xact_rollback AS transactions FROM pg_stat_database WHERE datname = %(database)s;
