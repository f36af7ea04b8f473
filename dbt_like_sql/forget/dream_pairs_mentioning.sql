-- The dreamer's own memory pairs (consolidation passes remember their summary in a reserved session) that
-- name a subject just deleted with forgotten memory: they quote it, so they are forgotten too.
SELECT p.id, p.token_count
FROM memory_pairs p
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND p.session_id = %(dream_session)s
  AND EXISTS (SELECT 1 FROM unnest(%(names)s::text[]) AS n (name)
              WHERE strpos(lower(p.user_message || ' ' || p.assistant_message), lower(n.name)) > 0)
ORDER BY p.id
FOR UPDATE;
