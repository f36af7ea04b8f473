-- The graph side of recall draws the subjects whose name holds a query word (retrieval/composite_ranking,
-- query_subjects). Without an index that meant computing to_tsvector for every live subject of the user on
-- every recall: 73 ms of a 124 ms statement for a user with 20,000 subjects (the recall bench's heavy user).
-- The index holds each subject's name words under the same expression the statement matches, so the match
-- reads only the subjects that have one of the query's words. It spans users like the other subject
-- indexes; the statement still scopes every row by user.
CREATE INDEX IF NOT EXISTS subjects_name_words_idx
    ON subjects USING gin (to_tsvector('english'::regconfig, subject_text));
ANALYZE subjects;
