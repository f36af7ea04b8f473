-- The dreaming bench's throughput runs date the same user again each run: forget its times and checkpoints.
WITH forgotten AS (
    DELETE FROM pair_times WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
)
UPDATE pair_stages SET dated_at = NULL WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
