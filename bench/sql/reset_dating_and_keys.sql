-- The dreaming bench's throughput runs date and key the same user again each run: forget its times, its
-- keys and both checkpoints.
WITH forgotten_times AS (
    DELETE FROM pair_times WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
), forgotten_keys AS (
    DELETE FROM memory_keys WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
)
UPDATE pair_stages SET dated_at = NULL, keyed_at = NULL WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
