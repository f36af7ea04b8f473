-- How Dagster partitions the users (`dreaming dagster partitioning`): no row, one partition a user; a row,
-- that many hash buckets of users.
CREATE TABLE IF NOT EXISTS dagster_layout (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    buckets     integer NOT NULL CHECK (buckets BETWEEN 1 AND 10000),
    switched_at timestamptz NOT NULL DEFAULT now()
);

-- A user's bucket: the first 32 bits of md5(user_id) modulo the bucket count (pipeline/buckets.py computes
-- the same in Python).
CREATE OR REPLACE FUNCTION user_bucket(user_id text, buckets integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (('x' || substr(md5(user_id), 1, 8))::bit(32)::bigint % buckets)::integer $$;

-- The users a bucket run dreams, written by its first step so that every later step covers the same users
-- (a user's work stops counting as pending halfway through the stages). Deleted when the run's last step
-- ends, with a user's erasure, and after a day if a run died.
CREATE TABLE IF NOT EXISTS bucket_run_users (
    run_id   text NOT NULL,
    user_id  text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, user_id)
);
CREATE INDEX IF NOT EXISTS bucket_run_users_user_idx ON bucket_run_users (user_id);
