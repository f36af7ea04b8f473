UPDATE subjects SET embedding_next = %(embedding)s WHERE id = %(id)s;
