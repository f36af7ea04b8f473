"""The Dagster instance's plumbing that dagster.yaml loads: its storage in Postgres with kept connections
(storage), the run launcher (run_launcher) with its warm run workers (run_workers, forked by fork_server from a
process that imported preload). The code location's definitions live in defs/."""
