-- The mega-node guard: the largest share of a user's pairs linked to any one subject.
-- (The reference's inverted-threshold bug showed up exactly as one subject linked to everything.)
WITH pairs AS (SELECT count(*) AS n FROM memory_pairs WHERE user_id = %(user_id)s),
     biggest AS (
         SELECT s.subject_text, count(*) AS linked
         FROM subject_memory_pair_links l JOIN subjects s ON s.id = l.subject_id
         WHERE l.user_id = %(user_id)s AND s.archived_at IS NULL
         GROUP BY s.id, s.subject_text
         ORDER BY linked DESC
         LIMIT 1)
SELECT pairs.n AS pairs, biggest.subject_text, coalesce(biggest.linked, 0) AS linked,
       CASE WHEN pairs.n > 0 THEN coalesce(biggest.linked, 0)::float / pairs.n ELSE 0 END AS share
FROM pairs LEFT JOIN biggest ON true;
