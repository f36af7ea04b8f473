-- The words of the pairs about to be forgotten: once their postings are gone, a word no pair of the user
-- holds any more is deleted with its text (delete_unused_lexemes).
SELECT DISTINCT unnest(w.lexeme_ids) AS lexeme_id
FROM pair_words w
WHERE w.pair_id = ANY (%(pair_ids)s::uuid[]);
