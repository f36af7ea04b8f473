-- Re-embedding writes new vectors beside the old ones, so an interrupted run resumes where it stopped
-- and nothing is unreadable until the final swap.
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS embedding_next vector({{ embedding_dimension }});
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS reply_embedding_next vector({{ embedding_dimension }});
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS embedding_next vector({{ embedding_dimension }});
