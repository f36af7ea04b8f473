-- The live key a presented secret belongs to (none when unknown or revoked).
SELECT id::text AS id, kg_id, name
FROM api_keys
WHERE secret_hash = %(secret_hash)s AND revoked_at IS NULL;
