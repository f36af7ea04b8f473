-- A subject the dreamer creates (its name was checked free beforehand).
INSERT INTO subjects (user_id, kg_id, subject_text, description_text, subject_type, embedding, created_at, last_seen_at)
VALUES (%(user_id)s, %(kg_id)s, %(name)s, %(description)s, %(subject_type)s, %(embedding)s, now(), now())
RETURNING id::text AS id;
