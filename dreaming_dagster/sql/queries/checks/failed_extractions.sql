-- Pairs of a user whose extraction failed max_attempts times (parked), the latest error and when the
-- oldest of them is next retried (its last attempt + the cool-down).
SELECT count(*)                                                    AS parked,
       (array_agg(last_error ORDER BY last_attempt_at DESC NULLS LAST))[1] AS last_error,
       min(last_attempt_at) + make_interval(secs => %(cooldown_seconds)s) AS next_retry_at
FROM pair_stages
WHERE user_id = %(user_id)s AND extracted_at IS NULL AND attempts >= %(max_attempts)s;
