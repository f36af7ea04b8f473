-- One query word's BM25 contribution to one pair: idf times the saturated, length-normalised term
-- frequency. Retrieval needs it twice (the lexical pool's pruned sum and every candidate's exact `lex`);
-- naming it once keeps the two from drifting apart, and signals.bm25 is its Python twin.
-- A single-SELECT, IMMUTABLE SQL function is inlined by the planner, so calling it costs what writing the
-- expression out did (tests/test_lexical.py checks the plan holds no function call).
CREATE OR REPLACE FUNCTION bm25_term_weight(idf float8, term_frequency float8, pair_length float8,
                                            average_length float8, k1 float8, b float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT idf * term_frequency * (k1 + 1)
           / (term_frequency + k1 * (1 - b + b * pair_length / average_length))
$$;
