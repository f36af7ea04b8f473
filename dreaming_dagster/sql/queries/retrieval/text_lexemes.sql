-- A text as the lexical index reads it: Postgres' 'english' lexemes with their frequency (the same
-- tokenization migration 0008 indexes pairs with and composite_ranking reads queries with).
SELECT t.lexeme, cardinality(t.positions) AS term_frequency
FROM unnest(to_tsvector('english', %(text)s::text)) AS t;
