"""`dreaming demo`: demo users from LongMemEval, dreamed through Dagster."""

from __future__ import annotations

from pathlib import Path

import click

from dreaming_dagster.cli.console import exit_on_sigterm, wide_console


@click.command()
@click.option("--users", default=5, show_default=True)
@click.option("--questions-per-user", default=8, show_default=True)
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="LongMemEval-format file (default: the shared oracle file).")
def demo(users: int, questions_per_user: int, dataset: Path | None) -> None:
    """Ingest demo users from LongMemEval and dream every user partition through Dagster."""
    from dreaming_dagster.demo import run_demo

    exit_on_sigterm()
    run_demo(users=users, questions_per_user=questions_per_user, dataset=dataset, console=wide_console())


COMMANDS = (demo,)
