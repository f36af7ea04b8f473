UPDATE memory_pairs SET kg_stored_at = now() WHERE id = %(id)s AND user_id = %(user_id)s;
