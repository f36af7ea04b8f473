-- Which of these content hashes does the user's graph already hold? (skip embedding known pairs)
SELECT content_hash
FROM memory_pairs
WHERE user_id = %(user_id)s
  AND kg_id = %(kg_id)s
  AND content_hash = ANY(%(content_hashes)s);
