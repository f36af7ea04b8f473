-- A subject left with no pair is deleted, not archived: nothing of the memory it came from may stay. Its
-- refinement-queue row goes by foreign key; subjects merged into it keep their own row (merged_into NULL).
DELETE FROM subjects
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND id = ANY (%(subject_ids)s::uuid[]) AND link_count = 0
RETURNING id, subject_text;
