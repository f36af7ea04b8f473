-- The ids of the user's pairs with these content hashes (an import's pairs, after they were saved).
SELECT id, content_hash FROM memory_pairs
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND content_hash = ANY (%(hashes)s::text[]);
