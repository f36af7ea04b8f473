-- One row of the deletion audit trail (migration 0027): counts only; an erasure's row names no user.
INSERT INTO forget_log (scope, kg_id, user_id, pairs, subjects_deleted, subjects_rebuilt, passes_redacted)
VALUES (%(scope)s, %(kg_id)s, CASE WHEN %(scope)s = 'user' THEN NULL ELSE %(user_id)s::text END, %(pairs)s,
        %(subjects_deleted)s, %(subjects_rebuilt)s, %(passes_redacted)s)
RETURNING id;
