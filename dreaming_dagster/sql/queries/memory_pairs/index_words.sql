-- Index the words of a batch of one user's pairs in the graphs kg_ids (a deferred save left them out; migration 0016). Pairs
-- already indexed change nothing: lexical_index_apply moves the statistics by the postings it adds.
SELECT lexical_index_apply(ARRAY(SELECT id FROM memory_pairs WHERE user_id = %(user_id)s AND kg_id = ANY(%(kg_ids)s::text[]) AND id = ANY(%(ids)s::uuid[])), 1);
