-- A new subject. The exact-string guard returns the existing live row when the same text is inserted
-- twice (the no-op update makes RETURNING see it); "inserted" tells the two cases apart.
INSERT INTO subjects (user_id, kg_id, subject_text, description_text, subject_type, embedding,
                      created_at, last_seen_at)
VALUES (%(user_id)s, %(kg_id)s, %(subject_text)s, %(description_text)s, %(subject_type)s, %(embedding)s,
        %(seen_at)s, %(seen_at)s)
ON CONFLICT (user_id, kg_id, md5(subject_text)) WHERE archived_at IS NULL
DO UPDATE SET subject_text = EXCLUDED.subject_text
RETURNING id, description_text, (xmax = 0) AS inserted;
