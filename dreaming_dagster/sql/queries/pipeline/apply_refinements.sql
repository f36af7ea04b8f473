-- A batch of refinements in one statement: each subject gets its clean name, narrative and the name's
-- vector. A name another live subject of the graph already holds is not taken (the unique name guard
-- would refuse it): the subject keeps its name and its vector, takes the narrative, and dream passes merge
-- the two later. Names proposed twice within a batch are resolved by the caller (first one wins).
-- A subject keeping its name keeps its vector (the caller sends NULL for it: a subject's vector is its
-- name's): its row then changes in no indexed column, so the update is HOT and writes no index entry —
-- re-embedding the same name gave a vector a rounding apart, which moved vector_changed_at and wrote an
-- entry in every index of subjects, an HNSW insertion among them (~1,400 buffers a subject).
-- Returns each updated subject with the name it has now.
-- The live subjects holding any of the batch's names are read once, for the whole batch, whichever plan
-- the planner picks. Looked up name by name, a graph that grew in this very sync (a new user's first
-- dream: its statistics say the user has no subjects) was planned as a scan of all the user's subjects for
-- every refined one, through whichever index leads with the user and graph — and twice, the check being
-- inlined into both CASEs below: 270 ms a batch of 50 at 2,000 pairs.
WITH holders AS MATERIALIZED (
    SELECT o.id, o.subject_text
    FROM subjects o
    WHERE o.user_id = %(user_id)s AND o.kg_id = %(kg_id)s AND o.archived_at IS NULL
      AND md5(o.subject_text) = ANY(ARRAY(SELECT md5(name) FROM unnest(%(subject_texts)s::text[]) AS name))
),
batch AS MATERIALIZED (
    SELECT b.id, b.subject_text, b.description_text, b.embedding,
           EXISTS (SELECT 1 FROM holders o WHERE o.subject_text = b.subject_text AND o.id <> b.id) AS name_taken
    FROM unnest(%(ids)s::uuid[], %(subject_texts)s::text[], %(description_texts)s::text[], %(embeddings)s::vector[])
         AS b (id, subject_text, description_text, embedding)
)
UPDATE subjects s
SET subject_text = CASE WHEN b.name_taken THEN s.subject_text ELSE b.subject_text END,
    embedding = CASE WHEN b.name_taken OR b.embedding IS NULL THEN s.embedding ELSE b.embedding END,
    description_text = b.description_text,
    refined_at = now()
FROM batch b
WHERE s.id = b.id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
RETURNING s.id, s.subject_text;
