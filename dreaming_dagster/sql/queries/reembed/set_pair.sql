-- Stage one pair's re-embedded vectors (both turns; reply_embedding_next stays NULL for a one-sided pair).
UPDATE memory_pairs SET embedding_next = %(embedding)s, reply_embedding_next = %(reply_embedding)s WHERE id = %(id)s;
