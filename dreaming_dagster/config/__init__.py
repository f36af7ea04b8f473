"""Configuration: the settings object, the one declaration of every setting. What is built from it lives
above: the process-wide defaults (process_defaults) and the environment Dagster runs under (dagster_env)."""
