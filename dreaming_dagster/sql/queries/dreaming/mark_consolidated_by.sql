-- Each subject a pass wrote remembers the input whose mutation wrote its name or description.
UPDATE subjects s
SET consolidated_by = (SELECT array_agg(DISTINCT x) FROM unnest(s.consolidated_by || w.input_ids) AS x)
FROM (SELECT subject_id, array_agg(input_id) AS input_ids
      FROM unnest(%(subject_ids)s::uuid[], %(input_ids)s::uuid[]) AS w (subject_id, input_id)
      GROUP BY subject_id) AS w
WHERE s.id = w.subject_id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s;
