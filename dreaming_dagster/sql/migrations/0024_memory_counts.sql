-- A user's pair count and live-subject count, kept per graph (issue 18: a sync touches only what its pairs
-- need). Every sync read both with count(*): the profile refresh counted the user's pairs and live
-- subjects, the hub rule the pairs again; recall of a user never dreamed counted them too. Here they are one
-- row, read by key. Side by side, each statement the counting way and this way taking turns (each
-- rolled back): on a kept 5,000-pair user the profile refresh 8.6 -> 2.6 ms (a single-user database plans
-- the subject count as a sequential scan of the wide subject rows) and the fast path's hub rule 3.8 -> 2.3
-- ms; on a 100,000-pair user never vacuumed (its counts read the heap) 445 -> 203 ms and 246 -> 2.4 ms.
--
-- memory_counts.pair_count equals count(*) of the graph's memory_pairs rows and live_subject_count that of
-- its subjects with archived_at NULL, kept by triggers in the writing statement: statement triggers for
-- pairs and subjects inserted or deleted (saves, COPY, the merge stage, cascades, a cleared graph), a row
-- trigger for a subject archived or restored (consolidation; it fires only when archived_at changes, so
-- the graph's other updates — link counts, refinements, reinforcement — pay nothing). Rows are written in
-- (user, graph) order, so statements covering several graphs wait for each other instead of deadlocking.
-- Pairs and subjects never move between graphs.

CREATE TABLE IF NOT EXISTS memory_counts (
    user_id            text NOT NULL,
    kg_id              text NOT NULL,
    pair_count         bigint NOT NULL DEFAULT 0,
    live_subject_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, kg_id)
);

-- Add each graph's rows in the statement's transition table, signed by the event (a delete subtracts).
-- One function for both tables: TG_ARGV[0] names the count.
CREATE OR REPLACE FUNCTION memory_counts_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF TG_ARGV[0] = 'pairs' THEN
        INSERT INTO memory_counts AS m (user_id, kg_id, pair_count)
        SELECT c.user_id, c.kg_id, sign * count(*) FROM changed_rows c
        GROUP BY c.user_id, c.kg_id ORDER BY c.user_id, c.kg_id
        ON CONFLICT (user_id, kg_id) DO UPDATE SET pair_count = m.pair_count + EXCLUDED.pair_count;
    ELSE
        INSERT INTO memory_counts AS m (user_id, kg_id, live_subject_count)
        SELECT c.user_id, c.kg_id, sign * count(*) FROM changed_rows c WHERE c.archived_at IS NULL
        GROUP BY c.user_id, c.kg_id ORDER BY c.user_id, c.kg_id
        ON CONFLICT (user_id, kg_id) DO UPDATE
            SET live_subject_count = m.live_subject_count + EXCLUDED.live_subject_count;
    END IF;
    RETURN NULL;
END;
$$;

-- A subject archived (-1) or restored (+1).
CREATE OR REPLACE FUNCTION memory_counts_subject_archived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_counts AS m (user_id, kg_id, live_subject_count)
    VALUES (NEW.user_id, NEW.kg_id, CASE WHEN NEW.archived_at IS NULL THEN 1 ELSE -1 END)
    ON CONFLICT (user_id, kg_id) DO UPDATE
        SET live_subject_count = m.live_subject_count + EXCLUDED.live_subject_count;
    RETURN NULL;
END;
$$;

-- A transition table serves one event a trigger, hence one trigger an event.
DROP TRIGGER IF EXISTS memory_counts_pairs_insert ON memory_pairs;
CREATE TRIGGER memory_counts_pairs_insert
    AFTER INSERT ON memory_pairs REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_counts_sync('pairs');
DROP TRIGGER IF EXISTS memory_counts_pairs_delete ON memory_pairs;
CREATE TRIGGER memory_counts_pairs_delete
    AFTER DELETE ON memory_pairs REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_counts_sync('pairs');
DROP TRIGGER IF EXISTS memory_counts_subjects_insert ON subjects;
CREATE TRIGGER memory_counts_subjects_insert
    AFTER INSERT ON subjects REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_counts_sync('subjects');
DROP TRIGGER IF EXISTS memory_counts_subjects_delete ON subjects;
CREATE TRIGGER memory_counts_subjects_delete
    AFTER DELETE ON subjects REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_counts_sync('subjects');
DROP TRIGGER IF EXISTS memory_counts_subjects_archived ON subjects;
CREATE TRIGGER memory_counts_subjects_archived
    AFTER UPDATE OF archived_at ON subjects
    FOR EACH ROW WHEN ((OLD.archived_at IS NULL) <> (NEW.archived_at IS NULL))
    EXECUTE FUNCTION memory_counts_subject_archived();

-- The counts of what is stored so far (the triggers above keep them from here on).
INSERT INTO memory_counts AS m (user_id, kg_id, pair_count, live_subject_count)
SELECT g.user_id, g.kg_id, coalesce(p.pairs, 0), coalesce(s.live_subjects, 0)
FROM (SELECT user_id, kg_id FROM memory_pairs UNION SELECT user_id, kg_id FROM subjects) g
LEFT JOIN (SELECT user_id, kg_id, count(*) AS pairs FROM memory_pairs GROUP BY user_id, kg_id) p
       USING (user_id, kg_id)
LEFT JOIN (SELECT user_id, kg_id, count(*) AS live_subjects FROM subjects WHERE archived_at IS NULL
           GROUP BY user_id, kg_id) s USING (user_id, kg_id)
ORDER BY g.user_id, g.kg_id
ON CONFLICT (user_id, kg_id) DO UPDATE
    SET pair_count = EXCLUDED.pair_count, live_subject_count = EXCLUDED.live_subject_count;
