-- A batch's pairs are merged: each keeps its subjects with the ids they landed on.
UPDATE pair_stages p
SET extracted_subjects = m.extracted_subjects, subjects_merged_at = now()
FROM unnest(%(ids)s::uuid[], %(extracted_subjects)s::jsonb[]) AS m(id, extracted_subjects)
WHERE p.pair_id = m.id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s;
