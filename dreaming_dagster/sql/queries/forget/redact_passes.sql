-- The audit trail keeps that a pass happened and what it counted, never text of forgotten memory: a pass
-- whose mutations, summary or error name a deleted subject (as a whole word: name_patterns), a deleted
-- subject or forgotten pair by id, or quote what dreaming wrote from a forgotten pair (forgotten_texts; ids
-- and texts as substrings: needles), or that read forgotten text (pass_ids: forget/pass_writes_from) loses its
-- mutations and summary.
UPDATE dreaming_passes p
SET mutations = '[]'::jsonb, summary = '[redacted: this pass concerned memory since forgotten]', error = NULL
WHERE p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
  AND p.summary <> '[redacted: this pass concerned memory since forgotten]'
  AND (p.id = ANY (%(pass_ids)s::uuid[]) OR EXISTS (SELECT 1
              FROM (SELECT lower(p.mutations::text || ' ' || p.summary || ' ' || coalesce(p.error, '')) AS text) AS pass
              WHERE pass.text ~ ANY (%(name_patterns)s::text[])
                 OR EXISTS (SELECT 1 FROM unnest(%(needles)s::text[]) AS n (needle)
                            WHERE strpos(pass.text, lower(n.needle)) > 0)));
