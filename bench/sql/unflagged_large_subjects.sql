-- How many live subjects of a user that are not flagged hubs link more than max_share of the user's
-- pairs (bench/graph.py: the graph-health target "no subject on more than 5 percent of pairs unless a hub").
SELECT count(*) AS n
FROM (SELECT s.id
      FROM subjects s
      JOIN subject_memory_pair_links l ON l.subject_id = s.id
      WHERE s.user_id = %(user_id)s AND s.archived_at IS NULL AND s.hub_since IS NULL
      GROUP BY s.id
      HAVING count(*) > %(max_share)s::float8 * %(pairs)s) large;
