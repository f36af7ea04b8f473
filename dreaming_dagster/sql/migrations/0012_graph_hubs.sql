-- Hubs (pipeline/hubs.py): a subject linked to more than a share of a user's pairs is flagged, not
-- removed: it stays browsable, and ranking gives it no weight. NULL: not a hub.
ALTER TABLE subjects ADD COLUMN IF NOT EXISTS hub_since timestamptz;
