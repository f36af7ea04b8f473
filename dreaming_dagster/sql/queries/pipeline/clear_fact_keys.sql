-- Before an extraction's facts are written (pipeline/extracting.py): the pairs' fact keys from an earlier
-- extraction go, so a pair extracted again holds only its latest facts.
DELETE FROM memory_keys
WHERE pair_id = ANY(%(ids)s::uuid[]) AND user_id = %(user_id)s AND kg_id = %(kg_id)s AND kind = 'fact';
