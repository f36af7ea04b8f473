-- Stage 5 input: live subjects whose description became a " | " junk drawer, as listed by
-- subject_refinement_queue (migration 0022 keeps it equal to that predicate; checked here again).
-- Each queued subject is read by its primary key (the lateral subquery, kept apart by OFFSET 0 so the
-- user filter below cannot turn into an index scan of the user's subjects inside it). Joined on the user's
-- subjects instead, a graph that grew in this very sync (a new user's first dream: its statistics say the
-- user has no subjects) was planned as a rescan of them for every queued subject: 5.8 s a batch at 2,000
-- pairs, most of that sync's time.
-- said: the texts of the subject's latest 50 pairs, what a new name must be found in (refiners.py).
SELECT s.id, s.subject_text, s.description_text, s.has_vector,
       coalesce((SELECT string_agg(t.text, ' ') FROM (
                     SELECT p.user_message || ' ' || p.assistant_message AS text
                     FROM subject_memory_pair_links l
                     JOIN memory_pairs p ON p.id = l.pair_id AND p.user_id = l.user_id AND p.kg_id = l.kg_id
                     WHERE l.subject_id = s.id AND l.user_id = s.user_id AND l.kg_id = s.kg_id
                     ORDER BY p.occurred_at DESC NULLS LAST, p.id
                     LIMIT 50) t), '') AS said
FROM subject_refinement_queue q
CROSS JOIN LATERAL (
    SELECT s.id, s.user_id, s.kg_id, s.subject_text, s.description_text, s.archived_at, s.reinforcement_count,
           s.embedding IS NOT NULL AS has_vector
    FROM subjects s
    WHERE s.id = q.subject_id
    OFFSET 0
) s
WHERE q.user_id = %(user_id)s AND q.kg_id = %(kg_id)s
  AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
  AND s.archived_at IS NULL AND s.description_text LIKE '%% | %%'
  AND NOT (s.id = ANY(%(skip_ids)s::uuid[]))  -- failed earlier in this run
ORDER BY s.reinforcement_count DESC, s.id
LIMIT %(limit)s;
