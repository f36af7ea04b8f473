-- An imported subject's merged_into / superseded_by, once every subject has its new id.
UPDATE subjects SET merged_into = %(merged_into)s::uuid, superseded_by = %(superseded_by)s::uuid
WHERE id = %(id)s::uuid AND user_id = %(user_id)s AND kg_id = %(kg_id)s;
