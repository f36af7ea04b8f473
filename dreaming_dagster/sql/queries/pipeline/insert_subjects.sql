-- A batch's new subjects, in one statement; their ids were chosen when the batch was planned, so the
-- pairs of the batch already name them. One writer per graph (the graph lock) and the plan's own
-- exact-name check keep the unique-name index from firing; if it ever does, the batch rolls back whole.
INSERT INTO subjects (id, user_id, kg_id, subject_text, description_text, subject_type, embedding,
                      created_at, last_seen_at, reinforcement_count)
SELECT n.id, %(user_id)s, %(kg_id)s, n.subject_text, n.description_text, n.subject_type, n.embedding,
       n.created_at, n.last_seen_at, n.reinforcement_count
FROM unnest(%(ids)s::uuid[], %(subject_texts)s::text[], %(description_texts)s::text[], %(subject_types)s::text[],
            %(embeddings)s::vector[], %(created_ats)s::timestamptz[], %(last_seen_ats)s::timestamptz[],
            %(reinforcement_counts)s::integer[])
     AS n(id, subject_text, description_text, subject_type, embedding, created_at, last_seen_at, reinforcement_count);
