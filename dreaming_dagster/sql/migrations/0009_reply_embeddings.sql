-- Pairs are embedded turn by turn. all-MiniLM-L6-v2 reads at most 256 word pieces, and a LongMemEval pair
-- written as "user: … assistant: …" has a median of 585: one vector of the pair read 45% of its text, and
-- diluted the user's turn with the reply's first lines. Embedding the turns apart reads more of the pair,
-- and the pair's similarity is the better of the two (bench/encoder_coverage.py: cosine Recall@10 0.467 →
-- 0.527, top-50 recall 0.704 → 0.733 on the oracle).
--   embedding        the user turn ("user: …"), or the assistant turn when the user turn is empty;
--   reply_embedding  the assistant turn ("assistant: …") when both turns have text, else NULL.
-- Pairs embedded before this migration hold one vector of the whole pair; they count as pending (a reply
-- vector is missing) and the embedding stage re-embeds both turns in place, so recall keeps working with
-- the old vector until the new ones land.
ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS reply_embedding vector({{ embedding_dimension }});
CREATE INDEX IF NOT EXISTS memory_pairs_reply_embedding_hnsw_idx
    ON memory_pairs USING hnsw (reply_embedding vector_cosine_ops);
-- "Who has pending embedding work?" stays an index lookup, as for the other checkpoints.
CREATE INDEX IF NOT EXISTS memory_pairs_pending_reply_embedding_idx
    ON memory_pairs (user_id, kg_id)
    WHERE reply_embedding IS NULL AND btrim(user_message) <> '' AND btrim(assistant_message) <> '';
