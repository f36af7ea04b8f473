-- Benchmark setup: every pair of a synthetic user is through every dreaming stage (bench/copy_pairs).
UPDATE pair_stages
SET extracted_at = now(), subjects_merged_at = now(), kg_stored_at = now(), dated_at = now(), keyed_at = now()
WHERE user_id = %(user_id)s AND kg_id = 'default';
