-- An event key whose sentence is also one of its pair's statements has no vector of its own
-- (extraction/keys.py has_own_vector): recall finds keys by vector only, and the statement's vector already
-- finds that sentence. Keys written before the rule lose theirs, as the keying stage now writes them.
UPDATE memory_keys e
SET embedding = NULL
WHERE e.kind = 'event' AND e.embedding IS NOT NULL
  AND EXISTS (SELECT 1 FROM memory_keys s
              WHERE s.pair_id = e.pair_id AND s.user_id = e.user_id AND s.kg_id = e.kg_id AND s.kind = 'statement'
                AND starts_with(e.key_text, s.key_text || ' ('));
