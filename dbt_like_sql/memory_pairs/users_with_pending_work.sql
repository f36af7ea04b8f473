-- Users with work for any dreaming stage, and a fingerprint of it (for sensor run keys). Every branch is
-- served by a partial index, so the query stays cheap with many users and a large table.
SELECT user_id,
       sum(pending)::bigint   AS pending,
       max(newest_at)         AS newest_at
FROM (
    SELECT user_id, count(*) AS pending, max(ingested_at) AS newest_at
    FROM memory_pairs
    WHERE embedding IS NULL
       OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> '')
    GROUP BY user_id
    UNION ALL
    SELECT user_id, count(*), max(ingested_at)
    FROM memory_pairs
    WHERE extracted_at IS NULL
      AND (attempts < %(max_attempts)s OR last_attempt_at IS NULL
           OR last_attempt_at < now() - make_interval(secs => %(cooldown_seconds)s))  -- parked, cool-down over
    GROUP BY user_id
    UNION ALL
    SELECT user_id, count(*), max(ingested_at)
    FROM memory_pairs WHERE extracted_at IS NOT NULL AND subjects_merged_at IS NULL GROUP BY user_id
    UNION ALL
    SELECT user_id, count(*), max(ingested_at)
    FROM memory_pairs WHERE subjects_merged_at IS NOT NULL AND kg_stored_at IS NULL GROUP BY user_id
    UNION ALL
    SELECT user_id, count(*), max(last_seen_at)
    FROM subjects WHERE archived_at IS NULL AND description_text LIKE '%% | %%' GROUP BY user_id
) AS work
GROUP BY user_id
ORDER BY user_id;
