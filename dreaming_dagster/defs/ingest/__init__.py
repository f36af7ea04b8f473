"""The memory domain: users as partitions, the memory_pairs asset, its sensor and job."""
