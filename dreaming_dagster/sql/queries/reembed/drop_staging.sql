ALTER TABLE memory_pairs DROP COLUMN IF EXISTS embedding_next;
ALTER TABLE memory_pairs DROP COLUMN IF EXISTS reply_embedding_next;
ALTER TABLE subjects DROP COLUMN IF EXISTS embedding_next;
ALTER TABLE memory_keys DROP COLUMN IF EXISTS embedding_next;
