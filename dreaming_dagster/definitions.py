"""The code location: loads and merges everything under ``dreaming_dagster/defs/``, partitioned as the
deployment's memory database says (one partition a user, or hash buckets: ``dreaming dagster partitioning``)."""

from pathlib import Path

import dagster as dg

from dreaming_dagster.defs.partitions import use_deployment_layout


@dg.definitions
def defs() -> dg.Definitions:
    use_deployment_layout()
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
