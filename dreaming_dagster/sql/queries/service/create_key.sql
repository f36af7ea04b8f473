INSERT INTO api_keys (kg_id, name, prefix, secret_hash)
VALUES (%(kg_id)s, %(name)s, %(prefix)s, %(secret_hash)s)
RETURNING id::text AS id, kg_id, name, prefix, created_at;
