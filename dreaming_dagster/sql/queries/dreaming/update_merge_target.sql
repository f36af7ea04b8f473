-- A merge's target after the host-side arithmetic (created_at = min, last_seen_at = max,
-- reinforcement_count = sum, importance = max, descriptions appended).
UPDATE subjects
SET created_at = %(created_at)s, last_seen_at = %(last_seen_at)s, reinforcement_count = %(reinforcement_count)s,
    importance = %(importance)s, description_text = %(description)s
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL;
