-- When things happened: the times each pair's user turn mentions ("last Saturday", "in May", "two weeks
-- ago"), resolved against the pair's occurred_at into day ranges (dreaming_dagster/dates/expressions.py)
-- by the dating stage (pipeline/dating.py), and the times an LLM extractor reports (source 'llm'). The
-- pair's own occurred_at is always one of its times; it is not repeated here. Recall's time_fit signal and
-- time-window pool read these rows (retrieval/composite_ranking.sql).
--
-- One row per mention, keyed by where it starts in the text (an LLM's: its place in the list), gone with
-- the pair. user_id and kg_id are the pair's: every query scopes by them.
CREATE TABLE IF NOT EXISTS pair_times (
    pair_id     uuid NOT NULL REFERENCES memory_pairs (id) ON DELETE CASCADE,
    user_id     text NOT NULL,
    kg_id       text NOT NULL,
    source      text NOT NULL CHECK (source IN ('text', 'llm')),
    position    integer NOT NULL CHECK (position >= 0),
    expression  text NOT NULL CHECK (length(expression) BETWEEN 1 AND 200),
    first_day   date NOT NULL CHECK (first_day >= DATE '0001-01-01'),
    last_day    date NOT NULL CHECK (last_day <= DATE '9999-12-31' AND last_day >= first_day),
    granularity text NOT NULL CHECK (granularity IN ('day', 'week', 'month', 'season', 'year')),
    certainty   real NOT NULL CHECK (certainty > 0 AND certainty <= 1),
    PRIMARY KEY (pair_id, source, position)
);
-- The time-window pool: a user's pairs with a time overlapping a window (last_day >= window start, then
-- first_day <= window end, read from the index).
CREATE INDEX IF NOT EXISTS pair_times_user_days_idx ON pair_times (user_id, kg_id, last_day, first_day);

-- The dating stage's checkpoint, beside the others. Existing pairs are pending: the next run dates them.
ALTER TABLE pair_stages ADD COLUMN IF NOT EXISTS dated_at timestamptz;
CREATE INDEX IF NOT EXISTS pair_stages_pending_dating_idx ON pair_stages (user_id, kg_id) WHERE dated_at IS NULL;

-- How well a time (a_first..a_last, inclusive days, soft edge a_margin days) fits a window (w_first..w_last,
-- w_margin): the share of the time's days inside the window when they overlap ("last month" fits a
-- "last week" window by a quarter); otherwise 1 falling to 0 over the two soft edges together (a Friday
-- pair fits a "this weekend" window by half). retrieval/signals.range_fit states the same in Python.
CREATE OR REPLACE FUNCTION range_fit(a_first date, a_last date, a_margin float8, w_first date, w_last date,
                                     w_margin float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN least(a_last, w_last) >= greatest(a_first, w_first)
        THEN (least(a_last, w_last) - greatest(a_first, w_first) + 1)::float8 / (a_last - a_first + 1)
    ELSE greatest(0, 1 - greatest(w_first - a_last, a_first - w_last)::float8
                         / greatest(a_margin + w_margin, 1e-9))
END;

-- The soft edge of a granularity, in days (dates/questions.MARGIN_DAYS).
CREATE OR REPLACE FUNCTION granularity_margin_days(granularity text)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE granularity WHEN 'day' THEN 1 WHEN 'week' THEN 3 WHEN 'month' THEN 7 WHEN 'season' THEN 15
                        WHEN 'year' THEN 30 ELSE 1 END;
