-- A deferred save defers the lexical index too. Indexing a pair's words is most of a save without
-- embedding (442 pairs/s with the insert trigger, 2,815 without, 2,000 LongMemEval pairs): a save that
-- sets dreaming.defer_word_index for its transaction skips the insert trigger, and the embedding stage
-- indexes the pair's words before embedding it (memory_pairs/index_words.sql; indexing is idempotent), so
-- the pair becomes findable by words and by vector at the same step, and an embedding outage does not
-- keep it from word search. Every other insert (COPY, saves with inline embedding) is indexed as before.
CREATE OR REPLACE FUNCTION lexical_index_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('dreaming.defer_word_index', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM lexical_index_apply(ARRAY(SELECT id FROM inserted_pairs), 1);
    RETURN NULL;
END;
$$;
