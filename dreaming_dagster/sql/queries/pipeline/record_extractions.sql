-- A batch's extraction results in one statement (a pair the database refuses is retried alone, in its
-- own savepoint, by pipeline/record_extraction).
UPDATE pair_stages p
SET summary = r.summary, extracted_subjects = r.extracted_subjects, extracted_at = now(),
    attempts = attempts + 1, last_error = NULL, last_attempt_at = now()
FROM unnest(%(ids)s::uuid[], %(summaries)s::text[], %(extracted_subjects)s::jsonb[])
     AS r(id, summary, extracted_subjects)
WHERE p.pair_id = r.id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.extracted_at IS NULL;
