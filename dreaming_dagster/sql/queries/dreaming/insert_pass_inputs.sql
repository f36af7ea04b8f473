-- The provider inputs of a pass whose mutations wrote a subject's text: the ids of the subjects each listed
-- and of the pairs it quoted (uuid[] literals, one an input).
INSERT INTO pass_inputs (id, pass_id, user_id, kg_id, subject_ids, pair_ids)
SELECT i.id, %(pass_id)s, %(user_id)s, %(kg_id)s, i.subject_ids::uuid[], i.pair_ids::uuid[]
FROM unnest(%(ids)s::uuid[], %(subject_ids)s::text[], %(pair_ids)s::text[]) AS i (id, subject_ids, pair_ids);
