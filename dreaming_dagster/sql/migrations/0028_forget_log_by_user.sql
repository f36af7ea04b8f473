-- An erasure also takes the user id off the forget_log rows of the user's earlier pair and session forgets
-- (forget/scrub_forget_log.sql): this index finds them without reading the whole audit trail.
CREATE INDEX IF NOT EXISTS forget_log_user_idx ON forget_log (user_id, kg_id) WHERE user_id IS NOT NULL;
