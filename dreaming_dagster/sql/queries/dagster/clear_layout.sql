DELETE FROM dagster_layout;
