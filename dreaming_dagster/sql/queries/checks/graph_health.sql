-- What must be zero once a user's graphs kg_ids are dreamed (crash-recovery tests and bench/reliability.py): pairs
-- not through every stage, live subjects sharing a name, duplicate links, pairs stored without links although
-- extraction found subjects (checks/orphan_pairs, run beside this), and subjects linked to no pair.
SELECT
    (SELECT count(*) FROM pair_stages WHERE user_id = %(user_id)s AND kg_id = ANY(%(kg_ids)s::text[])
                                                      AND kg_stored_at IS NULL) AS unfinished_pairs,
    (SELECT count(*) FROM (SELECT 1 FROM subjects WHERE user_id = %(user_id)s AND kg_id = ANY(%(kg_ids)s::text[])
                             AND archived_at IS NULL
                           GROUP BY kg_id, lower(subject_text) HAVING count(*) > 1) d) AS duplicate_subjects,
    (SELECT count(*) FROM (SELECT 1 FROM subject_memory_pair_links l JOIN subjects s ON s.id = l.subject_id
                           WHERE s.user_id = %(user_id)s AND s.kg_id = ANY(%(kg_ids)s::text[])
                           GROUP BY l.subject_id, l.pair_id
                           HAVING count(*) > 1) d) AS duplicate_links,
    (SELECT count(*) FROM subjects s WHERE s.user_id = %(user_id)s AND s.kg_id = ANY(%(kg_ids)s::text[]) AND NOT EXISTS
        (SELECT 1 FROM subject_memory_pair_links l WHERE l.subject_id = s.id)) AS unlinked_subjects;
