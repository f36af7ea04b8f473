-- What a user's memory holds, in each of the graphs kg_ids, for materialization metadata and the CLI.
SELECT p.kg_id,
       count(*)                                  AS pairs,
       coalesce(sum(token_count), 0)             AS tokens,
       count(DISTINCT session_id)                AS sessions,
       count(*) FILTER (WHERE embedding IS NULL
                        OR (reply_embedding IS NULL AND btrim(user_message) <> ''
                            AND btrim(assistant_message) <> '')) AS pending_embedding,
       count(*) FILTER (WHERE s.extracted_at IS NULL) AS pending_extraction,
       -- Parked: extraction failed max_attempts times; retried once per cool-down, or now by
       -- `dreaming retry-failed`.
       count(*) FILTER (WHERE s.extracted_at IS NULL AND s.attempts >= %(max_attempts)s) AS failed_extraction,
       -- Pairs whose user turn mentions a time the dating stage resolved (pair_times).
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pair_times t
                                      WHERE t.pair_id = p.id AND t.user_id = p.user_id AND t.kg_id = p.kg_id))
                                                 AS dated_pairs,
       min(occurred_at)                          AS first_occurred_at,
       max(occurred_at)                          AS last_occurred_at
FROM memory_pairs p
JOIN pair_stages s ON s.pair_id = p.id
WHERE p.user_id = %(user_id)s AND p.kg_id = ANY(%(kg_ids)s::text[])
GROUP BY p.kg_id
ORDER BY p.kg_id;
