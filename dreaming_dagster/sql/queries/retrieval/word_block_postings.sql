-- Every block (migration 0017) of some of a user's words, with its version (its row's xmin and posting
-- count), and the postings of those blocks the caller does not hold at that version: what
-- retrieval/lexical_postings.py reads for words whose version changed (lexical_query_words.sql). The block
-- list is one snapshot's, so blocks a re-sort replaced are absent. One row a word: its blocks' numbers,
-- versions and counts in block order, whether each block's postings are sent, and the sent postings
-- joined in that order, each block's array in Postgres' binary array form (array_send: no number is
-- formatted as text or parsed back; the caller reads the values with a few vector operations, the counts
-- locating each block's header).
--
-- Parameters: user_id, kg_id, lexeme_ids (bigint[]: the words), held_lexeme_ids, held_block_nos and
-- held_versions (bigint[], integer[], bigint[] of xmin, pairwise: the blocks held). Only the user's own words
-- are read (user_lexemes is the scope: word_blocks has no user column).
SELECT b.lexeme_id,
       array_agg(b.block_no ORDER BY b.block_no) AS block_nos,
       array_agg(b.xmin::text::bigint ORDER BY b.block_no) AS versions,
       array_agg(b.posting_count ORDER BY b.block_no) AS posting_counts,
       array_agg(h.lexeme_id IS NULL ORDER BY b.block_no) AS sent,
       string_agg(array_send(b.pair_nos), ''::bytea ORDER BY b.block_no) FILTER (WHERE h.lexeme_id IS NULL)
           AS pair_nos,
       string_agg(array_send(b.term_frequencies), ''::bytea ORDER BY b.block_no) FILTER (WHERE h.lexeme_id IS NULL)
           AS term_frequencies,
       string_agg(array_send(b.pair_lengths), ''::bytea ORDER BY b.block_no) FILTER (WHERE h.lexeme_id IS NULL)
           AS pair_lengths
FROM user_lexemes u
JOIN word_blocks b ON b.lexeme_id = u.id AND b.posting_count > 0
LEFT JOIN unnest(%(held_lexeme_ids)s::bigint[], %(held_block_nos)s::integer[], %(held_versions)s::bigint[])
          AS h (lexeme_id, block_no, version)
       ON h.lexeme_id = b.lexeme_id AND h.block_no = b.block_no AND h.version = b.xmin::text::bigint
WHERE u.id = ANY(%(lexeme_ids)s::bigint[]) AND u.user_id = %(user_id)s AND u.kg_id = %(kg_id)s
GROUP BY b.lexeme_id;
