UPDATE memory_pairs SET embedding_next = %(embedding)s WHERE id = %(id)s;
