-- What a subject a pass wrote is called by its remaining pairs: the name their extraction gave it (the most
-- given, then the first in the alphabet), or NULL when none does (the pass created it). Also the live subject
-- that already holds that name, if another does.
SELECT s.id::text AS id, s.subject_text, given.name, holder.id::text AS holder_id
FROM subjects s
LEFT JOIN LATERAL (
    SELECT btrim(e.item ->> 'name') AS name
    FROM subject_memory_pair_links l
    JOIN pair_stages st ON st.pair_id = l.pair_id
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(st.extracted_subjects) = 'array' THEN st.extracted_subjects ELSE '[]'::jsonb END)
        AS e (item)
    WHERE l.subject_id = s.id AND e.item ->> 'subject_id' = s.id::text
      AND btrim(coalesce(e.item ->> 'name', '')) <> ''
    GROUP BY 1
    ORDER BY count(*) DESC, 1
    LIMIT 1
) AS given ON true
LEFT JOIN subjects holder ON holder.user_id = s.user_id AND holder.kg_id = s.kg_id AND holder.archived_at IS NULL
                         AND md5(holder.subject_text) = md5(given.name)
                         AND holder.subject_text = given.name AND holder.id <> s.id
WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.id = ANY (%(subject_ids)s::uuid[]);
