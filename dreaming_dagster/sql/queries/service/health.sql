-- What /healthz reports: the database answers, and the newest applied migration.
SELECT max(version) AS schema_version FROM schema_migrations;
