-- Revoking twice keeps the first time.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id::text = %(key_id)s
RETURNING id::text AS id, kg_id, name, prefix, revoked_at;
