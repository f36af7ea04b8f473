-- Delete the pairs: their stages, dated events and links go by foreign key, their postings and statistics
-- by the lexical index's delete trigger (migration 0008), the graph's counts by migration 0024's.
DELETE FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND id = ANY (%(pair_ids)s::uuid[]);
