-- Is this name held by another live subject of the user's graph? (a rename must not break the guard)
SELECT 1 FROM subjects
WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s AND archived_at IS NULL
  AND md5(subject_text) = md5(%(subject_text)s) AND id <> %(id)s;
