-- Which of the given lower-cased names the user's memory already holds, and whether each is a hub: the
-- live subjects, and the subjects extracted from pairs not merged yet (an earlier batch of the same
-- backlog). The offline extractor ranks a recurring name first (extraction/entities.salient_in_memory).
-- The live subjects are found by subjects_live_lower_name_idx (migration 0022), not by lower-casing every
-- subject of the user: that scan was 8 ms of a new pair's fast path at 3,242 subjects, and grew with them.
WITH asked AS (
    SELECT DISTINCT unnest(%(names)s::text[]) AS name
), held AS (
    SELECT lower(s.subject_text) AS name, s.hub_since IS NOT NULL AS hub
    FROM subjects s
    WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND s.archived_at IS NULL
      AND lower(s.subject_text) = ANY(%(names)s::text[])
    UNION ALL
    SELECT lower(e.value ->> 'name'), false
    FROM pair_stages p
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE jsonb_typeof(p.extracted_subjects) WHEN 'array' THEN p.extracted_subjects ELSE '[]' END) AS e (value)
    WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
      AND p.extracted_at IS NOT NULL AND p.subjects_merged_at IS NULL
)
SELECT asked.name, bool_or(held.hub) AS hub
FROM asked JOIN held USING (name)
GROUP BY asked.name;
