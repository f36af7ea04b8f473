-- Words of the user no pair holds any more (their last postings were just removed): the word's text goes.
DELETE FROM user_lexemes
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND id = ANY (%(lexeme_ids)s::bigint[]) AND pair_count = 0;
