-- Size of a user's graph.
SELECT (SELECT count(*) FROM subjects WHERE user_id = %(user_id)s AND archived_at IS NULL) AS subjects,
       (SELECT count(*) FROM subjects WHERE user_id = %(user_id)s AND archived_at IS NULL
                                       AND is_key_subject) AS key_subjects,
       (SELECT count(*) FROM subject_memory_pair_links WHERE user_id = %(user_id)s) AS links,
       (SELECT count(*) FROM memory_pairs WHERE user_id = %(user_id)s) AS pairs,
       (SELECT count(*) FROM pair_stages WHERE user_id = %(user_id)s AND kg_stored_at IS NOT NULL) AS stored_pairs,
       (SELECT count(*) FROM pair_stages WHERE user_id = %(user_id)s AND extracted_at IS NULL
                                          AND attempts > 0) AS failing_pairs;
