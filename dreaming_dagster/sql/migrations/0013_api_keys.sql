-- API keys of the HTTP service (dreaming serve). A key is bound to one tenant, the kg_id every request
-- made with it reads and writes: a key of one tenant can never name another's graph. Only a SHA-256 of
-- the secret is stored (the secret is 32 random bytes, so a fast hash is as strong as a slow one); the
-- prefix shows which key is which in `dreaming keys list` without revealing it.
CREATE TABLE IF NOT EXISTS api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kg_id       text NOT NULL CHECK (kg_id <> ''),
    name        text NOT NULL DEFAULT '',
    prefix      text NOT NULL,
    secret_hash text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
