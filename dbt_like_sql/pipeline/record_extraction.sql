UPDATE memory_pairs
SET summary = %(summary)s, extracted_subjects = %(extracted_subjects)s, extracted_at = now(),
    attempts = attempts + 1, last_error = NULL, last_attempt_at = now()
WHERE id = %(id)s AND user_id = %(user_id)s AND extracted_at IS NULL;
