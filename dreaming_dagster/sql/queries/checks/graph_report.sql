-- The shape of one user's graphs kg_ids, one row each (bench/graph.py, `dreaming stats`, `dreaming sync`,
-- the subject_links asset): live subjects, links, pairs; the share of subjects linked to a single pair; the
-- median number of subjects per pair (pairs with none count as 0); the largest subject, its share of the
-- pairs and whether it is a flagged hub; and how many hubs are flagged.
WITH pairs AS (
    SELECT kg_id, count(*) AS n FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = ANY(%(kg_ids)s::text[]) GROUP BY kg_id
),
subject_links AS (
    SELECT s.kg_id, s.id, s.subject_text, s.hub_since IS NOT NULL AS hub, count(l.pair_id) AS linked
    FROM subjects s
    LEFT JOIN subject_memory_pair_links l ON l.subject_id = s.id
    WHERE s.user_id = %(user_id)s AND s.kg_id = ANY(%(kg_ids)s::text[]) AND s.archived_at IS NULL
    GROUP BY s.kg_id, s.id, s.subject_text, s.hub_since
),
per_pair AS (
    SELECT p.kg_id, p.id, count(l.subject_id) AS subjects
    FROM memory_pairs p
    LEFT JOIN subject_memory_pair_links l ON l.pair_id = p.id
    WHERE p.user_id = %(user_id)s AND p.kg_id = ANY(%(kg_ids)s::text[])
    GROUP BY p.kg_id, p.id
),
largest AS (
    SELECT DISTINCT ON (kg_id) kg_id, subject_text, linked, hub
    FROM subject_links ORDER BY kg_id, linked DESC, subject_text
)
SELECT pairs.kg_id,
       pairs.n AS pairs,
       (SELECT count(*) FROM subject_links s WHERE s.kg_id = pairs.kg_id) AS subjects,
       (SELECT coalesce(sum(linked), 0)::bigint FROM subject_links s WHERE s.kg_id = pairs.kg_id) AS links,
       (SELECT count(*) FILTER (WHERE linked = 1)::float8 / greatest(count(*), 1)
        FROM subject_links s WHERE s.kg_id = pairs.kg_id) AS singleton_share,
       (SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY subjects)
        FROM per_pair pp WHERE pp.kg_id = pairs.kg_id) AS median_subjects_per_pair,
       largest.subject_text AS largest_subject,
       coalesce(largest.linked, 0)::float8 / pairs.n AS largest_share,
       coalesce(largest.hub, false) AS largest_is_hub,
       (SELECT count(*) FROM subject_links s WHERE s.kg_id = pairs.kg_id AND s.hub) AS hubs
FROM pairs
LEFT JOIN largest USING (kg_id)
ORDER BY pairs.kg_id;
