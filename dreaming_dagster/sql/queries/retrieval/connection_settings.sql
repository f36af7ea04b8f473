-- Settings of a recall connection, applied once when it opens.
-- hnsw.ef_search: the HNSW search breadth. pgvector 0.6 returns at most ef_search rows from one index
-- scan, so it must be at least the pool size; larger values trade latency for recall of the true top-K.
-- synchronous_commit off: each recall writes the user's last-query time; losing the last few of those
-- in a crash is harmless, waiting for a WAL flush on every query is not.
-- work_mem 32MB: the lexical pool groups the postings it reads by pair (~60,000 for a wide query on a
-- 100,000-pair user, ~5 MB to sort); under the default 4 MB that sort spills to disk.
-- plan_cache_mode force_custom_plan: a prepared statement (DREAMING_RECALL_PREPARED_STATEMENTS) is planned
-- with each call's parameters, never with a generic plan that would pick one pool strategy (HNSW or an
-- exact scan) for users of every size (~15-20x slower for a large user).
SELECT set_config('hnsw.ef_search', %(ef_search)s, false),
       set_config('synchronous_commit', 'off', false),
       set_config('work_mem', '32MB', false),
       set_config('plan_cache_mode', 'force_custom_plan', false);
