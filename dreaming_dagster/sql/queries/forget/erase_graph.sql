-- Erase one user's graph, step 1 of 3 (memory/forgetting.py runs them in one transaction, so a crash leaves
-- all of it or none): the word index set-based (the transaction sets dreaming.erasing_graph, so the pairs'
-- delete trigger skips its row-by-row removal: migration 0027), and the graph's audit, state, profile and
-- fast-path record. Tables no foreign key ties together, hence one statement. Returns how many subjects and
-- pairs steps 2 and 3 delete.
WITH words AS (
    DELETE FROM word_blocks b USING user_lexemes u
    WHERE u.user_id = %(user_id)s AND u.kg_id = %(kg_id)s AND b.lexeme_id = u.id
),
forward AS (
    DELETE FROM pair_words w USING memory_pairs p
    WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s AND w.pair_id = p.id
),
-- The vocabulary and statistics, the audit, state, profile and fast-path record (migration 0029).
keyed AS (
    SELECT erase_graph_state(%(user_id)s, %(kg_id)s) AS rows
)
SELECT (SELECT count(*) FROM subjects WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS subjects,
       (SELECT count(*) FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s) AS pairs,
       (SELECT rows FROM keyed) AS state_rows;
