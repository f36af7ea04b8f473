-- Lexical retrieval: a per-user BM25 index over every pair's text, kept in step with memory_pairs by
-- triggers, so recall can draw candidates by words as well as by vector (retrieval/composite_ranking).
--
-- Why BM25 in tables rather than ts_rank: on the LongMemEval oracle, BM25 over Postgres' own english
-- lexemes ranks better than ts_rank / ts_rank_cd over the same lexemes (bench/lexical.py: Recall@10
-- 0.630 vs 0.562, top-50 recall 79.6% vs 72.0%), and BM25 needs per-user statistics (how many of the
-- user's pairs hold a word; the user's average pair length) that a GIN index does not keep.
--
-- Words are Postgres' 'english' text-search lexemes (stemmed, stop words dropped) of
-- "user_message assistant_message"; retrieval/composite_ranking reads a query the same way.

-- Per-user vocabulary: one row per (user, kg, lexeme) with its document frequency (BM25's idf). The id
-- keys the postings, so a posting is small and a query reaches only its own user's postings: the ids it
-- scans come from this table filtered by user.
CREATE TABLE IF NOT EXISTS user_lexemes (
    id         bigserial PRIMARY KEY,
    user_id    text NOT NULL,
    kg_id      text NOT NULL,
    lexeme     text NOT NULL,
    pair_count bigint NOT NULL CHECK (pair_count >= 0),
    UNIQUE (user_id, kg_id, lexeme)
);

-- One row per (pair, lexeme): the postings. pair_length is BM25's document length; occurred_at is copied so
-- the as_of filter runs inside the index. impact is the posting's BM25 term weight (k1 1.2, b 0.75, the
-- user's average pair length when it was written): it only orders a lexeme's postings, so the lexical pool
-- can read the best postings of each query word instead of all of them (recall scores with the current
-- statistics).
CREATE TABLE IF NOT EXISTS pair_lexemes (
    lexeme_id      bigint NOT NULL,  -- user_lexemes.id (no foreign key: bulk loads skip the check per row)
    pair_id        uuid NOT NULL,
    term_frequency integer NOT NULL CHECK (term_frequency > 0),
    pair_length    integer NOT NULL CHECK (pair_length > 0),
    occurred_at    timestamptz NOT NULL,
    impact         real NOT NULL,
    PRIMARY KEY (lexeme_id, pair_id)
);
CREATE INDEX IF NOT EXISTS pair_lexemes_impact_idx
    ON pair_lexemes (lexeme_id, impact DESC, pair_id) INCLUDE (term_frequency, pair_length, occurred_at);

-- Per-user corpus size: pairs with at least one lexeme, and their lexemes in all (average pair length).
CREATE TABLE IF NOT EXISTS lexical_corpora (
    user_id      text NOT NULL,
    kg_id        text NOT NULL,
    pair_count   bigint NOT NULL CHECK (pair_count >= 0),
    lexeme_count bigint NOT NULL CHECK (lexeme_count >= 0),
    PRIMARY KEY (user_id, kg_id)
);

-- Add (sign = 1) or remove (sign = -1) the given pairs' postings and statistics. The pairs are read from
-- memory_pairs, so the caller runs while they are there (after an insert, before a delete). Idempotent:
-- the statistics move by exactly the postings inserted (ON CONFLICT DO NOTHING returns only new rows) or
-- deleted, so indexing a pair twice, or removing one that was never indexed, changes nothing.
CREATE OR REPLACE FUNCTION lexical_index_apply(pair_ids uuid[], sign integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    pair record;
BEGIN
    -- One writer per user's statistics at a time, taken in a fixed order: two concurrent saves for the
    -- same user would otherwise update the same lexeme rows in different orders and could deadlock.
    PERFORM pg_advisory_xact_lock(hashtextextended('lexical-index:' || owner.user_id || '/' || owner.kg_id, 0))
    FROM (SELECT DISTINCT p.user_id, p.kg_id FROM unnest(pair_ids) AS ids (id) JOIN memory_pairs p USING (id)
          ORDER BY 1, 2) AS owner;

    IF sign > 0 THEN
        -- One statement: its sub-statements share a snapshot (taken after the lock above), so lexeme ids
        -- are the ones inserted here (RETURNING) plus the ones that existed before it.
        WITH batch AS MATERIALIZED (
            SELECT p.user_id, p.kg_id, t.lexeme, p.id AS pair_id, cardinality(t.positions) AS term_frequency,
                   sum(cardinality(t.positions)) OVER (PARTITION BY p.id) AS pair_length, p.occurred_at
            -- Joined through unnest, not "id = ANY": plpgsql caches a generic plan, and from an empty
            -- table's statistics that plan would scan all of memory_pairs on every save.
            FROM unnest(pair_ids) AS ids (id)
            JOIN memory_pairs p USING (id)
            CROSS JOIN LATERAL unnest(to_tsvector('english', p.user_message || ' ' || p.assistant_message)) AS t
        ),
        -- A lexeme new to the user: every posting of it is new, so it starts with its final count.
        new_lexemes AS (
            INSERT INTO user_lexemes (user_id, kg_id, lexeme, pair_count)
            SELECT user_id, kg_id, lexeme, count(*) FROM batch
            GROUP BY user_id, kg_id, lexeme ORDER BY user_id, kg_id, lexeme
            ON CONFLICT (user_id, kg_id, lexeme) DO NOTHING
            RETURNING id, user_id, kg_id, lexeme
        ),
        lexeme_ids AS (
            SELECT id, user_id, kg_id, lexeme, true AS is_new FROM new_lexemes
            UNION ALL
            SELECT u.id, u.user_id, u.kg_id, u.lexeme, false
            FROM (SELECT DISTINCT user_id, kg_id, lexeme FROM batch) b
            JOIN user_lexemes u USING (user_id, kg_id, lexeme)
        ),
        average AS (
            SELECT b.user_id, b.kg_id,
                   (coalesce(c.lexeme_count, 0) + b.lexemes)::float8 / (coalesce(c.pair_count, 0) + b.pairs) AS length
            FROM (SELECT user_id, kg_id, count(DISTINCT pair_id) AS pairs, sum(term_frequency) AS lexemes
                  FROM batch GROUP BY user_id, kg_id) b
            LEFT JOIN lexical_corpora c USING (user_id, kg_id)
        ),
        added AS (
            INSERT INTO pair_lexemes (lexeme_id, pair_id, term_frequency, pair_length, occurred_at, impact)
            SELECT i.id, b.pair_id, b.term_frequency, b.pair_length, b.occurred_at,
                   b.term_frequency * 2.2 / (b.term_frequency + 1.2 * (0.25 + 0.75 * b.pair_length / a.length))
            FROM batch b
            JOIN lexeme_ids i USING (user_id, kg_id, lexeme)
            JOIN average a USING (user_id, kg_id)
            ON CONFLICT DO NOTHING
            RETURNING lexeme_id, pair_id, term_frequency
        ),
        frequencies AS (
            UPDATE user_lexemes u SET pair_count = u.pair_count + f.pairs
            FROM (SELECT a.lexeme_id, count(*) AS pairs FROM added a
                  JOIN lexeme_ids i ON i.id = a.lexeme_id AND NOT i.is_new
                  GROUP BY a.lexeme_id) f
            WHERE u.id = f.lexeme_id
        )
        INSERT INTO lexical_corpora AS c (user_id, kg_id, pair_count, lexeme_count)
        SELECT i.user_id, i.kg_id, count(DISTINCT a.pair_id), sum(a.term_frequency)
        FROM added a JOIN lexeme_ids i ON i.id = a.lexeme_id
        GROUP BY i.user_id, i.kg_id
        ON CONFLICT (user_id, kg_id) DO UPDATE
            SET pair_count = c.pair_count + EXCLUDED.pair_count,
                lexeme_count = c.lexeme_count + EXCLUDED.lexeme_count;
    ELSE
        -- Removal is rare (pairs are immutable in normal operation): pair by pair, by primary key.
        FOR pair IN
            SELECT p.id, p.user_id, p.kg_id,
                   tsvector_to_array(to_tsvector('english', p.user_message || ' ' || p.assistant_message)) AS lexemes
            FROM unnest(pair_ids) AS ids (id) JOIN memory_pairs p USING (id)
        LOOP
            WITH removed AS (
                DELETE FROM pair_lexemes pl
                USING user_lexemes u
                WHERE u.user_id = pair.user_id AND u.kg_id = pair.kg_id AND u.lexeme = ANY (pair.lexemes)
                  AND pl.lexeme_id = u.id AND pl.pair_id = pair.id
                RETURNING pl.lexeme_id, pl.term_frequency
            ),
            corpus AS (
                UPDATE lexical_corpora c
                SET pair_count = c.pair_count - 1, lexeme_count = c.lexeme_count - r.lexemes
                FROM (SELECT sum(term_frequency) AS lexemes FROM removed HAVING count(*) > 0) r
                WHERE c.user_id = pair.user_id AND c.kg_id = pair.kg_id
            )
            UPDATE user_lexemes u SET pair_count = u.pair_count - 1
            FROM removed r
            WHERE u.id = r.lexeme_id;
        END LOOP;
    END IF;
END;
$$;

-- Inserts are indexed per statement (a COPY or a multi-row insert is one set-based pass).
CREATE OR REPLACE FUNCTION lexical_index_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lexical_index_apply(ARRAY(SELECT id FROM inserted_pairs), 1);
    RETURN NULL;
END;
$$;

-- Deletes and text edits are rare (pairs are immutable in normal operation): per row, before the change,
-- so the old text is still there to remove.
CREATE OR REPLACE FUNCTION lexical_index_before_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lexical_index_apply(ARRAY[OLD.id], -1);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION lexical_index_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lexical_index_apply(ARRAY[NEW.id], 1);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS memory_pairs_lexical_insert ON memory_pairs;
CREATE TRIGGER memory_pairs_lexical_insert AFTER INSERT ON memory_pairs
    REFERENCING NEW TABLE AS inserted_pairs FOR EACH STATEMENT EXECUTE FUNCTION lexical_index_inserted();
DROP TRIGGER IF EXISTS memory_pairs_lexical_delete ON memory_pairs;
CREATE TRIGGER memory_pairs_lexical_delete BEFORE DELETE ON memory_pairs
    FOR EACH ROW EXECUTE FUNCTION lexical_index_before_change();
DROP TRIGGER IF EXISTS memory_pairs_lexical_update_old ON memory_pairs;
CREATE TRIGGER memory_pairs_lexical_update_old BEFORE UPDATE OF user_message, assistant_message ON memory_pairs
    FOR EACH ROW WHEN (OLD.user_message IS DISTINCT FROM NEW.user_message
                       OR OLD.assistant_message IS DISTINCT FROM NEW.assistant_message)
    EXECUTE FUNCTION lexical_index_before_change();
DROP TRIGGER IF EXISTS memory_pairs_lexical_update_new ON memory_pairs;
CREATE TRIGGER memory_pairs_lexical_update_new AFTER UPDATE OF user_message, assistant_message ON memory_pairs
    FOR EACH ROW WHEN (OLD.user_message IS DISTINCT FROM NEW.user_message
                       OR OLD.assistant_message IS DISTINCT FROM NEW.assistant_message)
    EXECUTE FUNCTION lexical_index_after_update();

-- Pairs stored before this migration, then fresh statistics for the planner (an empty table's would
-- mislead the first plans of the trigger's statements).
SELECT lexical_index_apply(ARRAY(SELECT id FROM memory_pairs), 1);
ANALYZE user_lexemes, pair_lexemes, lexical_corpora;
