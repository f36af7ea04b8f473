UPDATE subjects
SET subject_text = %(subject_text)s, description_text = %(description_text)s, embedding = %(embedding)s,
    refined_at = now()
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s;
