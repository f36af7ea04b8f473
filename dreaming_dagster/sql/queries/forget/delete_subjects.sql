-- Subjects a forget takes out whole: made by a pass from forgotten text, or renamed back onto a name another
-- subject holds (their links moved to it first: move_links). Returns each with its name.
DELETE FROM subjects
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND id = ANY (%(subject_ids)s::uuid[])
RETURNING id, subject_text;
