-- New mentions of subjects that were live before the batch, in one statement: the first name stays, the
-- description is the one the batch's appends ended on, and each subject is reinforced once a pair.
UPDATE subjects s
SET description_text = r.description_text,
    last_seen_at = greatest(s.last_seen_at, r.last_seen_at),
    reinforcement_count = s.reinforcement_count + r.reinforcements
FROM unnest(%(ids)s::uuid[], %(description_texts)s::text[], %(last_seen_ats)s::timestamptz[],
            %(reinforcements)s::integer[]) AS r(id, description_text, last_seen_at, reinforcements)
WHERE s.id = r.id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s;
