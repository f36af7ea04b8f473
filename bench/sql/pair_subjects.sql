-- The live, non-hub subjects of each pair of some users (bench/graph_expansion.py), with the pair's content
-- hash and time. Params: user_ids (text[]), kg_id.
SELECT p.id::text AS pair_id, p.user_id, p.content_hash, p.occurred_at,
       coalesce(array_agg(s.id::text) FILTER (WHERE s.id IS NOT NULL), '{}') AS subject_ids
FROM memory_pairs p
LEFT JOIN subject_memory_pair_links l ON l.pair_id = p.id AND l.user_id = p.user_id AND l.kg_id = p.kg_id
LEFT JOIN subjects s ON s.id = l.subject_id AND s.user_id = p.user_id AND s.kg_id = p.kg_id
                    AND s.archived_at IS NULL AND s.hub_since IS NULL
WHERE p.user_id = ANY(%(user_ids)s) AND p.kg_id = %(kg_id)s
GROUP BY p.id;
