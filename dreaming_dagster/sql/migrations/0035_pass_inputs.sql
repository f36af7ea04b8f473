-- What each consolidation pass input showed its provider, as ids and never text: the subjects it listed (with
-- their names and descriptions) and the pairs whose summaries or dream text it quoted. A subject keeps the
-- inputs whose mutations wrote its current name or description (consolidated_by), so that forgetting a pair
-- undoes every write whose input held its text (memory/forgetting.py). Rows go with their pass.
CREATE TABLE IF NOT EXISTS pass_inputs (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    pass_id     uuid NOT NULL REFERENCES dreaming_passes (id) ON DELETE CASCADE,
    user_id     text NOT NULL,
    kg_id       text NOT NULL,
    subject_ids uuid[] NOT NULL,
    pair_ids    uuid[] NOT NULL
);
CREATE INDEX IF NOT EXISTS pass_inputs_user_kg_idx ON pass_inputs (user_id, kg_id);
CREATE INDEX IF NOT EXISTS pass_inputs_pass_idx ON pass_inputs (pass_id);

ALTER TABLE subjects ADD COLUMN IF NOT EXISTS consolidated_by uuid[] NOT NULL DEFAULT '{}';
