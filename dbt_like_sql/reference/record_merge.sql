UPDATE memory_pairs
SET extracted_subjects = %(extracted_subjects)s, subjects_merged_at = now()
WHERE id = %(id)s AND user_id = %(user_id)s;
