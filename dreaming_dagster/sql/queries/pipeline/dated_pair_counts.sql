-- A user's pairs and how many of them carry a dated event (pair_times), in the graphs kg_ids (NULL: all).
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pair_times t
                                      WHERE t.pair_id = s.pair_id AND t.user_id = s.user_id AND t.kg_id = s.kg_id))
           AS with_times,
       count(*) FILTER (WHERE s.dated_at IS NULL) AS pending
FROM pair_stages s
WHERE s.user_id = %(user_id)s AND (%(kg_ids)s::text[] IS NULL OR s.kg_id = ANY(%(kg_ids)s::text[]));
