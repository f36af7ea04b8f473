-- Benchmark setup: memory for the HNSW build (the graph must fit, or the build slows down sharply) and
-- both cores for it.
SELECT set_config('maintenance_work_mem', '2GB', false),
       set_config('max_parallel_maintenance_workers', '1', false);
