SELECT id::text AS id, mode, provider, status, started_at, finished_at, input_tokens, tokens_consumed, applied,
       skipped, failed, decayed, summary
FROM dreaming_passes
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s
ORDER BY started_at DESC
LIMIT %(limit)s;
