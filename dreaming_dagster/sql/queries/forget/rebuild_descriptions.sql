-- A surviving subject's description is rebuilt from its remaining pairs: the descriptions their extraction
-- gave this subject, joined with ' | ' as the merge stage joins them (so the refinement queue's trigger
-- queues it and the next dream condenses it), or '' when none remains. Text merged from a forgotten pair
-- cannot survive this. Returns the subjects whose description changed.
WITH rebuilt AS (
    SELECT s.id,
           coalesce((SELECT string_agg(DISTINCT btrim(e.item ->> 'description'), ' | ')
                     FROM subject_memory_pair_links l
                     JOIN pair_stages st ON st.pair_id = l.pair_id
                     CROSS JOIN LATERAL jsonb_array_elements(
                         CASE WHEN jsonb_typeof(st.extracted_subjects) = 'array' THEN st.extracted_subjects
                              ELSE '[]'::jsonb END) AS e (item)
                     WHERE l.subject_id = s.id AND e.item ->> 'subject_id' = s.id::text
                       AND btrim(coalesce(e.item ->> 'description', '')) <> ''), '') AS description
    FROM subjects s
    WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.id = ANY (%(subject_ids)s::uuid[])
)
UPDATE subjects s
SET description_text = r.description
FROM rebuilt r
WHERE s.id = r.id AND s.description_text IS DISTINCT FROM r.description
RETURNING s.id;
