-- What dreaming wrote from the pairs about to be forgotten and could have been quoted elsewhere: their
-- summaries and the descriptions their extraction gave subjects (at least 12 characters: shorter text would
-- match by chance). The audit trail loses the text of any pass that quotes one (redact_passes).
SELECT DISTINCT text
FROM pair_stages st
CROSS JOIN LATERAL (
    SELECT btrim(st.summary) AS text
    UNION ALL
    SELECT btrim(e.item ->> 'description')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(st.extracted_subjects) = 'array' THEN st.extracted_subjects
                                   ELSE '[]'::jsonb END) AS e (item)
) AS written
WHERE st.pair_id = ANY (%(pair_ids)s::uuid[]) AND length(written.text) >= 12;
