-- Whether the target graph already has subjects (an export's graph is imported only into an empty one).
SELECT count(*) AS subjects FROM subjects WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
