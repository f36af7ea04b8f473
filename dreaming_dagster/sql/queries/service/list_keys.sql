SELECT id::text AS id, kg_id, name, prefix, created_at, revoked_at
FROM api_keys
ORDER BY created_at, id;
