-- An LLM extractor's facts (what the user states about themselves, extraction/schema.py) are index keys of
-- their own kind, written by the extraction stage beside the keying stage's statements and events.
ALTER TABLE memory_keys DROP CONSTRAINT IF EXISTS memory_keys_kind_check;
ALTER TABLE memory_keys ADD CONSTRAINT memory_keys_kind_check CHECK (kind IN ('statement', 'event', 'fact'));
