-- The dreaming backlog across all users, for /metrics: pairs waiting for each stage (each count served by
-- the stage's partial index) and pairs whose extraction is parked.
SELECT
    (SELECT count(*) FROM memory_pairs
     WHERE embedding IS NULL
        OR (reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> '')) AS embedding,
    (SELECT count(*) FROM pair_stages WHERE dated_at IS NULL)                                        AS dating,
    (SELECT count(*) FROM pair_stages WHERE keyed_at IS NULL)                                        AS keying,
    (SELECT count(*) FROM pair_stages WHERE extracted_at IS NULL)                                    AS extraction,
    (SELECT count(*) FROM pair_stages WHERE extracted_at IS NOT NULL AND subjects_merged_at IS NULL)  AS merge,
    (SELECT count(*) FROM pair_stages WHERE subjects_merged_at IS NOT NULL AND kg_stored_at IS NULL)  AS links,
    (SELECT count(*) FROM pair_stages
     WHERE extracted_at IS NULL AND attempts >= %(max_attempts)s)                                      AS failed;
