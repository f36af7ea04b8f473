-- A new mention of an existing subject: the first name stays, the description grows, and the subject
-- is reinforced as of when the pair happened.
UPDATE subjects
SET description_text = %(description_text)s,
    last_seen_at = greatest(last_seen_at, %(seen_at)s),
    reinforcement_count = reinforcement_count + 1
WHERE id = %(id)s AND user_id = %(user_id)s AND kg_id = %(kg_id)s;
