"""Configuration: the settings object (the one declaration of every setting), the process-wide defaults
built from it, and the environment Dagster runs under."""
