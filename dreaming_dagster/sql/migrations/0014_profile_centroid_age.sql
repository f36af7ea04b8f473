-- When a retrieval profile's subject centroid was computed. Dreaming refreshes the profile after every
-- run, but averaging every live subject vector costs time in proportion to the graph (~13 ms at 3,300
-- subjects) while one new pair moves the mean by a fraction of a percent: the centroid is recomputed only
-- when enough subjects changed since centroid_at (retrieval/refresh_profile.sql).
ALTER TABLE recall_profiles ADD COLUMN IF NOT EXISTS centroid_at timestamptz;
UPDATE recall_profiles SET centroid_at = refreshed_at WHERE subject_centroid IS NOT NULL;
