-- The dreamer's own memory pairs (consolidation passes remember their summary in a reserved session) that
-- name a subject just deleted with forgotten memory: they quote it, so they are forgotten too. A name
-- matches as a whole word (forgetting.word_patterns): a deleted "Pea" does not take a summary that says "speak".
SELECT p.id, p.token_count
FROM memory_pairs p
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.session_id = %(dream_session)s
  AND lower(p.user_message || ' ' || p.assistant_message) ~ ANY (%(name_patterns)s::text[])
ORDER BY p.id
FOR UPDATE;
