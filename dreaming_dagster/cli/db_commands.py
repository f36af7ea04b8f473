"""`dreaming db`: the embedded Postgres server (only when DREAMING_DATABASE_URL is unset)."""

from __future__ import annotations

import click

from dreaming_dagster.process_defaults import default_settings


@click.group()
def db() -> None:
    """The embedded Postgres server (only when DREAMING_DATABASE_URL is unset)."""


@db.command("status")
def db_status() -> None:
    settings = default_settings()
    if not settings.uses_embedded_database:
        click.echo("using DREAMING_DATABASE_URL (no embedded server)")
        return
    running = (settings.pgdata_dir / "postmaster.pid").exists()
    click.echo(f"embedded server in {settings.pgdata_dir}: {'running' if running else 'stopped'}")


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server (e.g. one left running by a killed process)."""
    from dreaming_dagster.storage import embedded

    settings = default_settings()
    stopped = embedded.stop(settings.pgdata_dir)
    click.echo("stopped" if stopped else "not running")


COMMANDS = (db,)
