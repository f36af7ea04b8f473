-- Every graph holding any row of the user, for an operator's erasure (all graphs): not only those with
-- pairs (pipeline/user_kgs) — a user who forgot every pair of a graph still has its counts, profile, corpus
-- statistics, dreaming state and audit there.
SELECT kg_id FROM memory_pairs WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM subjects WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM memory_counts WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM recall_profiles WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM lexical_corpora WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM user_lexemes WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM dreaming_state WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM dreaming_passes WHERE user_id = %(user_id)s
UNION SELECT kg_id FROM fast_path_syncs WHERE user_id = %(user_id)s
ORDER BY kg_id;
