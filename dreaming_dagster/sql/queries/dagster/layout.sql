-- The deployment's Dagster partitioning: the bucket count, or no row (one partition a user).
SELECT buckets, switched_at FROM dagster_layout;
