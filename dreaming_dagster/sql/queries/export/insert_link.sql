-- One imported link.
INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id)
VALUES (%(subject_id)s, %(pair_id)s, %(user_id)s, %(kg_id)s)
ON CONFLICT DO NOTHING;
