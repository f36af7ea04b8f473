-- The pairs of benchmark users (training/encoder.py), with their texts, both vectors and the names of the
-- subjects the dream linked to each, oldest first. Params: user_ids (text[]), kg_id.
SELECT p.user_id, p.id, p.content_hash, p.session_id, p.turn_index, p.occurred_at, p.user_message,
       p.assistant_message, p.embedding, p.reply_embedding,
       coalesce((SELECT array_agg(s.subject_text ORDER BY s.subject_text)
                 FROM subject_memory_pair_links l
                 JOIN subjects s ON s.id = l.subject_id AND s.user_id = l.user_id AND s.kg_id = l.kg_id
                 WHERE l.pair_id = p.id AND l.user_id = p.user_id AND l.kg_id = p.kg_id), '{}') AS subjects
FROM memory_pairs p
WHERE p.user_id = ANY(%(user_ids)s) AND p.kg_id = %(kg_id)s
ORDER BY p.user_id, p.occurred_at, p.session_id, p.turn_index;
