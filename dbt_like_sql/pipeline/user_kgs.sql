-- The knowledge graphs a user has pairs in.
SELECT DISTINCT kg_id FROM memory_pairs WHERE user_id = %(user_id)s ORDER BY kg_id;
