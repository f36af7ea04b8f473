UPDATE memory_keys SET embedding_next = %(embedding)s
WHERE pair_id = %(pair_id)s AND kind = %(kind)s AND position = %(position)s;
