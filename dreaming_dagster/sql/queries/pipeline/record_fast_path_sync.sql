-- The fast path's latest sync of a graph and what each stage did, for Dagster (fast_path_sensor reports it
-- as the user partition's asset events); a new number each time, so each sync is reported once.
INSERT INTO fast_path_syncs AS f (user_id, kg_id, stages)
VALUES (%(user_id)s, %(kg_id)s, %(stages)s)
ON CONFLICT (user_id, kg_id) DO UPDATE
SET seq = nextval('fast_path_syncs_seq'), synced_at = now(), stages = EXCLUDED.stages;
