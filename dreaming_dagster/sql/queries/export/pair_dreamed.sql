-- An imported pair's dreaming, as the export had it: its extraction and checkpoints (so no stage redoes it).
UPDATE pair_stages
SET summary = %(summary)s, extracted_subjects = %(extracted_subjects)s,
    extracted_at = CASE WHEN %(extracted)s THEN now() END,
    subjects_merged_at = CASE WHEN %(linked)s THEN now() END,
    kg_stored_at = CASE WHEN %(linked)s THEN now() END,
    dated_at = CASE WHEN %(dated)s THEN now() END,
    keyed_at = CASE WHEN %(keyed)s THEN now() END
WHERE pair_id = %(pair_id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s;
