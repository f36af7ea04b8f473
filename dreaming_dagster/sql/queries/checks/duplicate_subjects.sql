-- Live subjects of one user's graph whose names differ only in case or surrounding space.
SELECT kg_id, lower(btrim(subject_text)) AS name, count(*) AS copies
FROM subjects
WHERE user_id = %(user_id)s AND archived_at IS NULL
GROUP BY kg_id, lower(btrim(subject_text))
HAVING count(*) > 1
ORDER BY copies DESC
LIMIT 20;
