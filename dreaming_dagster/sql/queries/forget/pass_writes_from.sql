-- The subjects whose name or description a consolidation pass wrote from an input that held forgotten text:
-- an input that quoted a forgotten pair (pair_ids), or listed a subject whose text came from forgotten memory
-- (subject_ids) in a pass that began after the first forgotten pair was saved (since: an earlier pass could not
-- have read it). With the passes those inputs belong to, whose audit and dream pair go too.
SELECT s.id::text AS id, i.pass_id::text AS pass_id
FROM pass_inputs i
JOIN dreaming_passes d ON d.id = i.pass_id
JOIN subjects s ON s.user_id = i.user_id AND s.kg_id = i.kg_id AND i.id = ANY (s.consolidated_by)
WHERE i.user_id = %(user_id)s AND i.kg_id = %(kg_id)s
  AND (i.pair_ids && %(pair_ids)s::uuid[]
       OR i.subject_ids && %(subject_ids)s::uuid[] AND d.started_at >= %(since)s::timestamptz);
