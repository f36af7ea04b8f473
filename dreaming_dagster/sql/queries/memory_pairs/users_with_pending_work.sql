-- Users with work for any dreaming stage, and a fingerprint of it (for sensor run keys). Every branch is
-- served by a partial index, so the query stays cheap with many users and a large table. The ranker's
-- training memory (its own graph, %(training_kg)s) is dreamed by the training job, never by the sensor.
SELECT user_id,
       sum(pending)::bigint   AS pending,
       max(newest_at)         AS newest_at
FROM (
    SELECT user_id, count(*) AS pending, max(ingested_at) AS newest_at
    FROM memory_pairs
    WHERE (embedding IS NULL
           OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> ''))
      AND kg_id <> %(training_kg)s
    GROUP BY user_id
    UNION ALL
    -- The stages' progress (pair_stages, migration 0019); the pair's save time from its row.
    SELECT s.user_id, count(*), max(p.ingested_at)
    FROM pair_stages s JOIN memory_pairs p ON p.id = s.pair_id
    WHERE s.extracted_at IS NULL AND s.kg_id <> %(training_kg)s
      AND (s.attempts < %(max_attempts)s OR s.last_attempt_at IS NULL
           OR s.last_attempt_at < now() - make_interval(secs => %(cooldown_seconds)s))  -- parked, cool-down over
    GROUP BY s.user_id
    UNION ALL
    -- Keys (migration 0030): a pair through every other stage but not keyed (dreamed before keys existed) is
    -- keyed by the user's next run; a pair still on its way counts once, in the branches above and below.
    SELECT s.user_id, count(*), max(p.ingested_at)
    FROM pair_stages s JOIN memory_pairs p ON p.id = s.pair_id
    WHERE s.keyed_at IS NULL AND s.kg_stored_at IS NOT NULL AND s.kg_id <> %(training_kg)s
    GROUP BY s.user_id
    UNION ALL
    SELECT s.user_id, count(*), max(p.ingested_at)
    FROM pair_stages s JOIN memory_pairs p ON p.id = s.pair_id
    WHERE s.extracted_at IS NOT NULL AND s.subjects_merged_at IS NULL AND s.kg_id <> %(training_kg)s
    GROUP BY s.user_id
    UNION ALL
    SELECT s.user_id, count(*), max(p.ingested_at)
    FROM pair_stages s JOIN memory_pairs p ON p.id = s.pair_id
    WHERE s.subjects_merged_at IS NOT NULL AND s.kg_stored_at IS NULL AND s.kg_id <> %(training_kg)s
    GROUP BY s.user_id
    UNION ALL
    SELECT user_id, count(*), max(last_seen_at)
    FROM subjects WHERE archived_at IS NULL AND description_text LIKE '%% | %%' AND kg_id <> %(training_kg)s
    GROUP BY user_id
) AS work
GROUP BY user_id
ORDER BY user_id;
