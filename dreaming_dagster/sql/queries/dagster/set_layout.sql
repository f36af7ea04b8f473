INSERT INTO dagster_layout (buckets) VALUES (%(buckets)s)
ON CONFLICT (singleton) DO UPDATE SET buckets = excluded.buckets, switched_at = now();
