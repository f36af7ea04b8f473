-- Subjects a pass renamed from forgotten text get back the name their pairs gave them, with its vector; their
-- description is rebuilt next (rebuild_descriptions) and they no longer count as written by a pass.
UPDATE subjects s
SET subject_text = coalesce(r.name, s.subject_text), embedding = coalesce(r.embedding, s.embedding),
    consolidated_by = '{}'
FROM unnest(%(subject_ids)s::uuid[], %(names)s::text[], %(embeddings)s::vector[]) AS r (id, name, embedding)
WHERE s.id = r.id AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s;
