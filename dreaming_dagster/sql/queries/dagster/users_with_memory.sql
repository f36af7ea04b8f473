-- Every user with memory (the partitions a switch back to one partition a user registers); not the ranker's
-- training memory.
SELECT DISTINCT user_id FROM memory_counts WHERE kg_id <> %(training_kg)s ORDER BY user_id;
