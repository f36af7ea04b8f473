-- Erase, step 2 of 3: the graph's subjects (links and refinement-queue rows go by foreign key).
DELETE FROM subjects WHERE user_id = %(user_id)s AND kg_id = %(kg_id)s;
