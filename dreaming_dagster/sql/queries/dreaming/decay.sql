-- Importance decay, over the time not yet decayed that lies past the grace period since last_seen_at:
-- importance × 0.5^(elapsed / half-life), never under the floor (consolidation/rules.decayed, in SQL).
-- Decaying only the new interval makes the curve the same whatever the pass schedule.
WITH due AS (
    SELECT id, importance,
           greatest(last_seen_at + make_interval(secs => %(grace_days)s * 86400.0),
                    coalesce(decayed_through, '-infinity'::timestamptz)) AS start_at
    FROM subjects
    WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL AND importance > %(floor)s
)
UPDATE subjects s
-- (The exponent stops at 1,000 half-lives: far below any floor, and past it float8 would underflow.)
SET importance = greatest(%(floor)s, due.importance * power(0.5::float8, least(1000.0,
        extract(epoch FROM (%(now)s::timestamptz - due.start_at))::float8 / 86400.0 / %(half_life_days)s))),
    decayed_through = %(now)s::timestamptz
FROM due
WHERE s.id = due.id AND due.start_at < %(now)s::timestamptz;
