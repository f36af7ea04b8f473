-- bench/reliability.py: one INSERT … SELECT of two short pairs for each of %(users)s users, the shape of
-- importing a whole user base in one statement (the lexical index trigger indexes it in one pass).
INSERT INTO memory_pairs (user_id, session_id, turn_index, user_message, assistant_message, occurred_at,
                          token_count, content_hash)
SELECT 'bulk-' || (n / 2), 's', n %% 2, 'walked the dog to the park ' || n, 'nice', now(), 8, md5(n::text)
FROM generate_series(0, 2 * %(users)s - 1) AS n;
