-- Flag the hubs of one user's graph (hubs.HubRule: linked to more than hub_share of the graph's
-- pairs once it has hub_min_pairs) and unflag subjects that fell back under the share. Only changes are
-- written; returns each change. subject_ids NULL: every subject of the graph (the Dagster asset); else only
-- those subjects and the current hubs (the fast path: exact under an unchanged rule, see
-- stages.link_pending). The graph's pair count is kept in memory_counts (migration 0024); MATERIALIZED: read
-- once, whatever the planner believes (right after a bulk load, before statistics existed, it re-counted
-- the user's pairs for every subject: seconds, not ms).
WITH pairs AS MATERIALIZED (
    SELECT coalesce((SELECT pair_count FROM memory_counts WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s), 0)
           AS n
),
-- A subject's links: its stored count (subjects.link_count, kept by the links' triggers: migration 0023),
-- read through the primary key and the hubs' partial index on the fast path.
linked AS MATERIALIZED (
    SELECT s.id AS subject_id, s.link_count AS n, s.hub_since IS NOT NULL AS was_hub
    FROM subjects s
    WHERE s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND %(subject_ids)s::uuid[] IS NULL
    UNION ALL
    SELECT s.id, s.link_count, s.hub_since IS NOT NULL
    FROM subjects s
    WHERE s.id IN (SELECT unnest(%(subject_ids)s::uuid[])
                   UNION
                   SELECT h.id FROM subjects h
                   WHERE h.user_id = %(user_id)s AND h.kg_id = %(kg_id)s AND h.hub_since IS NOT NULL)
      AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s AND %(subject_ids)s::uuid[] IS NOT NULL
),
changed AS MATERIALIZED (
    SELECT linked.subject_id
    FROM linked CROSS JOIN pairs
    WHERE linked.was_hub <> (pairs.n >= %(hub_min_pairs)s AND linked.n > %(hub_share)s::float8 * pairs.n)
)
-- Only the subjects whose flag changes (usually none) are updated, found by their ids as one array: a join
-- of the decisions with the user's subjects was planned, for a graph that grew in this very sync (its
-- statistics say the user has no subjects), as a rescan of the user's subjects for every subject (1.1 s at
-- 2,000 pairs). A changed subject's flag flips; the graph lock keeps anything else from flipping it between.
UPDATE subjects s
SET hub_since = CASE WHEN s.hub_since IS NULL THEN now() END
WHERE s.id = ANY(ARRAY(SELECT changed.subject_id FROM changed))
  AND s.user_id = %(user_id)s AND s.kg_id = %(kg_id)s
RETURNING s.subject_text, s.link_count AS linked_pairs, s.hub_since IS NOT NULL AS is_hub;
