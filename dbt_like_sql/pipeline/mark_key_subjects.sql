-- A subject becomes a key subject the moment it has a linked pair.
UPDATE subjects SET is_key_subject = true
WHERE id = ANY(%(subject_ids)s::uuid[]) AND user_id = %(user_id)s AND NOT is_key_subject
  AND link_count > 0;
