-- The newest row of the deletion audit trail (0: nothing was ever forgotten).
SELECT coalesce(max(id), 0) AS id FROM forget_log;
