-- Words of the user's graph no pair holds any more (their last postings were just removed, or an indexing
-- that lost its pairs to this forget left them at zero): the word's text goes. Run under the word index's
-- lock (lock_word_index), so no save is between adding a word and its postings.
DELETE FROM user_lexemes
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND pair_count = 0;
