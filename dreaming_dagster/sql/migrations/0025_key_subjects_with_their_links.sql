-- A subject becomes a key subject in the same row version as its link count moves (issue 18: dreaming
-- >= 50 pairs/s). The link stage added a batch's links (the count triggers of migration 0023 updating each
-- linked subject) and then marked the new ones key subjects in a second UPDATE: two new versions of a
-- ~1.9 kB row per newly linked subject in one transaction. A page kept a quarter free (fillfactor 75, three
-- rows a page) has room for one new version, so the second was not HOT: a new entry in every index of
-- subjects, an HNSW insertion among them. A new user's first sync of 400 pairs (side by side):
-- the two statements' 0.92 s, 1,324 updates of which 597 HOT. Here the count trigger sets the flag itself
-- (sticky, as before: a deleted link never clears it), and a page keeps half free (two rows and room for
-- two new versions: the link batch's, then the merge's or refinement's next), so they stay HOT.
--
-- The flag no longer moves updated_at (the count trigger's updates never did): a subject becomes key with
-- its first link, in the sync that created or reinforced it, which already moved it.

ALTER TABLE subjects SET (fillfactor = 50);

CREATE OR REPLACE FUNCTION subject_link_counts_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    PERFORM 1 FROM subjects s WHERE s.id IN (SELECT l.subject_id FROM changed_links l) ORDER BY s.id FOR UPDATE;
    UPDATE subjects s SET link_count = s.link_count + sign * c.links,
                          is_key_subject = s.is_key_subject OR sign > 0
    FROM (SELECT l.subject_id, count(*)::integer AS links FROM changed_links l GROUP BY l.subject_id) c
    WHERE s.id = c.subject_id;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION subject_link_counts_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM subjects s
    WHERE s.id IN (SELECT o.subject_id FROM old_links o UNION SELECT n.subject_id FROM new_links n)
    ORDER BY s.id FOR UPDATE;
    UPDATE subjects s SET link_count = s.link_count + c.links,
                          is_key_subject = s.is_key_subject OR c.links > 0
    FROM (SELECT moved.subject_id, sum(moved.links)::integer AS links
          FROM (SELECT o.subject_id, -1 AS links FROM old_links o
                UNION ALL SELECT n.subject_id, 1 FROM new_links n) moved
          GROUP BY moved.subject_id HAVING sum(moved.links) <> 0) c
    WHERE s.id = c.subject_id;
    RETURN NULL;
END;
$$;
