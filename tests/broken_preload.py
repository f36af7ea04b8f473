"""A fork-server preload that fails as a broken code location would, with an error other than ImportError
(tests/test_run_workers.py)."""

raise RuntimeError("a preload that breaks")
