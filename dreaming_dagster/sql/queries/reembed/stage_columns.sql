-- Re-embedding writes new vectors beside the old ones, so an interrupted run resumes where it stopped
-- and nothing is unreadable until the final swap.
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS embedding_next vector({{ embedding_dimension }});
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS reply_embedding_next vector({{ embedding_dimension }});
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS embedding_next vector({{ embedding_dimension }});
ALTER TABLE memory_keys ADD COLUMN IF NOT EXISTS embedding_next vector({{ embedding_dimension }});
-- Inline like the columns they replace (migration 0021): a new column takes the type's default storage,
-- pgvector's EXTERNAL, which would put every re-embedded vector back in the TOAST table.
ALTER TABLE memory_pairs ALTER COLUMN embedding_next SET STORAGE MAIN,
                         ALTER COLUMN reply_embedding_next SET STORAGE MAIN;
ALTER TABLE subjects ALTER COLUMN embedding_next SET STORAGE MAIN;
ALTER TABLE memory_keys ALTER COLUMN embedding_next SET STORAGE MAIN;
