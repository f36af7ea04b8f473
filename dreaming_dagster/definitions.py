"""The code location: everything under ``dreaming_dagster/defs/``, partitioned as the deployment's memory
database says (one partition a user, or hash buckets: ``dreaming dagster partitioning``)."""

from pathlib import Path

import dagster as dg

from dreaming_dagster.defs.layout import Layout, deployment_layout


def definitions_for(layout: Layout) -> dg.Definitions:
    """The code location built for ``layout``."""
    return layout.definitions(dg.load_from_defs_folder(path_within_project=Path(__file__).parent))


@dg.definitions
def defs() -> dg.Definitions:
    return definitions_for(deployment_layout())
