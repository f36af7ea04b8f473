"""`dreaming exec`, `ui` and `dagster` (partitioning, rebuild): Dagster's tools on the project's instance."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from dreaming_dagster.cli.console import fail
from dreaming_dagster.process_defaults import default_settings
from dreaming_dagster.storage.records import validate_identifier


def run_with_dagster_env(argv: list[str]) -> int:
    """Run ``argv`` with Dagster pointed at the project's dagster.yaml and storage, in its own process group
    (process_groups.py). On the embedded default this process holds the server for as long as ``argv`` runs,
    and the server stops when the last process using it exits."""
    from dreaming_dagster.dagster_env import configure_dagster_environment
    from dreaming_dagster.process_groups import run_in_process_group

    configure_dagster_environment(default_settings())
    # The project's own tools (dagster, dg) live beside this interpreter: `.venv/bin/dreaming exec -- dagster
    # …` must work without the venv on PATH.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    try:
        return run_in_process_group(argv)
    except FileNotFoundError:
        fail(f"command not found: {argv[0]}")


@click.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def exec_command(command: tuple[str, ...]) -> None:
    """Run COMMAND under the project's Dagster instance (e.g. `dreaming exec -- dg check defs`)."""
    sys.exit(run_with_dagster_env(list(command)))


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("dg_args", nargs=-1, type=click.UNPROCESSED)
def ui(dg_args: tuple[str, ...]) -> None:
    """Start the Dagster UI and daemon (`dg dev`) on the configured database, sensors on."""
    dg = Path(sys.executable).with_name("dg")
    sys.exit(run_with_dagster_env([str(dg), "dev", *dg_args]))


@click.group("dagster")
def dagster_group() -> None:
    """How Dagster partitions the users: one partition a user, or hash buckets (docs/deploy.md)."""


@dagster_group.command("partitioning")
@click.option("--buckets", type=click.IntRange(1, 10_000), default=None,
              help="Switch to this many hash buckets of users (past DREAMING_DAGSTER_MAX_USER_PARTITIONS users).")
@click.option("--per-user", is_flag=True, help="Switch back to one partition a user (registers every user "
              "with memory, up to DREAMING_DAGSTER_MAX_USER_PARTITIONS).")
@click.option("--force", is_flag=True, help="Switch even with dreaming runs queued or running.")
def dagster_partitioning(buckets: int | None, per_user: bool, force: bool) -> None:
    """Show, or switch, the deployment's partitioning. The choice is kept in the memory database; Dagster's
    processes read it when the code location loads (restart `dreaming ui`, or reload the code location).
    Run history, asset events and the memory stay as they are."""
    from dreaming_dagster.defs.partitioning_switch import (
        CANCEL_WAIT_SECONDS,
        RunsInFlightError,
        change_partitioning,
        current_partitioning,
    )
    from dreaming_dagster.pipeline.buckets import describe_layout

    if buckets is not None and per_user:
        fail("choose one: --buckets N or --per-user")
    if buckets is None and not per_user:
        click.echo(f"partitioning: {describe_layout(current_partitioning())}")
        return
    wanted = 0 if per_user else buckets
    try:
        previous, switch = change_partitioning(default_settings(), wanted, force=force)
    except RunsInFlightError as exc:
        fail(str(exc))
    click.echo(f"partitioning: {describe_layout(wanted)} (was {describe_layout(previous)})"
               + (f"; canceled {switch.canceled:,} run(s) of the old partitions" if switch.canceled else "")
               + (f" ({switch.not_seen_stopping:,} still running after {CANCEL_WAIT_SECONDS:.0f} s, marked "
                  "canceled)" if switch.not_seen_stopping else "")
               + (f"; canceled {switch.backfills_canceled:,} backfill(s)" if switch.backfills_canceled else "")
               + ("" if wanted else f"; registered {switch.registered:,} user partition(s)")
               + (f"; {switch.reconciled:,} user(s) shown dreamed again" if switch.reconciled else ""))
    click.echo("restart `dreaming ui` (or reload the code location) to load it")


@dagster_group.command("rebuild")
@click.option("--user", "user_ids", multiple=True, required=True, help="A user whose graph to rebuild (repeat it).")
def dagster_rebuild(user_ids: tuple[str, ...]) -> None:
    """Rebuild users' graphs from their stored pairs through Dagster: an asset backfill of the dreaming assets,
    run by the daemon of `dreaming ui`, whose status in the UI follows its runs (with hash buckets, every user
    of the users' buckets is rebuilt)."""
    from dreaming_dagster.definitions import defs
    from dreaming_dagster.defs.graph_rebuilds import rebuild_users

    users = [validate_identifier(user, "user_id") for user in user_ids]
    try:
        backfill_id, partitions = rebuild_users(default_settings(), defs(), users)
    except ValueError as exc:
        fail(str(exc))
    click.echo(f"backfill {backfill_id} requested: {len(partitions)} partition(s) ({', '.join(partitions[:5])}"
               f"{', …' if len(partitions) > 5 else ''}); the daemon of `dreaming ui` runs it")


COMMANDS = (exec_command, ui, dagster_group)
