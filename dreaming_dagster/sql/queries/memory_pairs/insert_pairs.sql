-- Stage 1: persist a batch of exchanges for one user in one statement, so the lexical index trigger
-- (migration 0008, per statement) indexes the whole batch in one set-based pass. The pipeline checkpoints
-- stay NULL. A pair already stored (same user, kg and content hash) inserts nothing and returns no row;
-- rows come back keyed by content hash (INSERT … SELECT does not promise input order).
-- Rows go in content-hash order: concurrent saves of overlapping batches then take the unique index's
-- row locks in one global order and wait for each other instead of deadlocking (16 savers of the same
-- pairs in shuffled orders deadlocked before).
INSERT INTO memory_pairs (
    user_id, kg_id, session_id, turn_index, user_message, assistant_message,
    occurred_at, token_count, content_hash, metadata, embedding, reply_embedding
)
SELECT %(user_id)s, %(kg_id)s, b.session_id, b.turn_index, b.user_message, b.assistant_message,
       b.occurred_at, b.token_count, b.content_hash, b.metadata, b.embedding, b.reply_embedding
FROM unnest(%(session_ids)s::text[], %(turn_indexes)s::int[], %(user_messages)s::text[],
            %(assistant_messages)s::text[], %(occurred_ats)s::timestamptz[], %(token_counts)s::int[],
            %(content_hashes)s::text[], %(metadatas)s::jsonb[], %(embeddings)s::vector[],
            %(reply_embeddings)s::vector[])
     AS b (session_id, turn_index, user_message, assistant_message, occurred_at, token_count, content_hash,
           metadata, embedding, reply_embedding)
ORDER BY b.content_hash
ON CONFLICT (user_id, kg_id, content_hash) DO NOTHING
RETURNING id, content_hash;
