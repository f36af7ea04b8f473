-- Two reliability fixes.
--
-- 1. Bulk imports across many users. The lexical index trigger (0008) took one advisory lock per (user, kg)
--    of a statement, so one INSERT … SELECT (or COPY) of pairs for 100,000 users ran out of the shared lock
--    table ("increase max_locks_per_transaction"). lexical_index_apply now locks hash buckets of users
--    instead: at most 256 locks per statement whatever the number of users, still one writer per user's
--    statistics at a time, still taken in a fixed order (no deadlocks). The body is otherwise 0008's.
--
-- 2. Extraction retries after an outage. A pair that exhausted its attempts was never tried again;
--    last_attempt_at lets the stage retry it once a cool-down has passed (graph/pending_extraction_batch).

ALTER TABLE memory_pairs ADD COLUMN IF NOT EXISTS last_attempt_at timestamptz;

CREATE OR REPLACE FUNCTION lexical_index_apply(pair_ids uuid[], sign integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    pair record;
BEGIN
    -- One writer per user's statistics at a time, taken in a fixed order: two concurrent saves for the
    -- same user would otherwise update the same lexeme rows in different orders and could deadlock.
    -- A user's lock is one of 256 buckets (by hash), so a statement covering any number of users takes at
    -- most 256 locks: one lock per user made a 100,000-user import fail with "out of shared memory".
    PERFORM pg_advisory_xact_lock(2042119937, bucket)
    FROM (SELECT DISTINCT (hashtextextended(p.user_id || '/' || p.kg_id, 0) & 255)::int AS bucket
          FROM unnest(pair_ids) AS ids (id) JOIN memory_pairs p USING (id)
          ORDER BY 1) AS owner;

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

