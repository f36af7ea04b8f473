SELECT id, subject_text, description_text
FROM subjects
WHERE embedding_next IS NULL
ORDER BY id
LIMIT %(limit)s;
