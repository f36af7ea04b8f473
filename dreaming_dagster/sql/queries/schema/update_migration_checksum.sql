UPDATE schema_migrations SET checksum = %(checksum)s WHERE version = %(version)s;
