UPDATE pair_stages
SET extracted_subjects = %(extracted_subjects)s, subjects_merged_at = now()
WHERE pair_id = %(id)s AND user_id = %(user_id)s;
