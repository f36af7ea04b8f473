"""The ``dreaming`` command line: one module a command group, each thin over the package's functions.

memory_commands (ingest, stats, inspect, export, forget, recall), dreaming_commands (sync, retry-failed,
dream, reembed), ranker_commands, demo_commands, dagster_commands (exec, ui, dagster), db_commands,
service_commands (serve, mcp, keys).
"""

from __future__ import annotations

import click
from pydantic import ValidationError

from dreaming_dagster.cli import (
    dagster_commands,
    db_commands,
    demo_commands,
    dreaming_commands,
    memory_commands,
    ranker_commands,
    service_commands,
)
from dreaming_dagster.cli.console import fail
from dreaming_dagster.config.settings import DreamingSettings, describe_settings_error


class _DreamingGroup(click.Group):
    """The command group: a bad DREAMING_* variable is an error naming it, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ValidationError as error:
            if error.title != DreamingSettings.__name__:
                raise
            fail(describe_settings_error(error))


@click.group(cls=_DreamingGroup)
def main() -> None:
    """dreaming: background memory consolidation for AI companions, on Dagster + Postgres/pgvector."""


for _group in (memory_commands, dreaming_commands, ranker_commands, demo_commands, dagster_commands, db_commands,
               service_commands):
    for _command in _group.COMMANDS:
        main.add_command(_command)
