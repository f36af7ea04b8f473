-- A question's english lexemes (bench/lexical.py).
SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(question)s));
