"""What every command group shares: the consoles, progress bars, and failing with a message."""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreaming_dagster.storage.records import InvalidInputError, validate_identifier

console = Console(stderr=True)


def wide_console() -> Console:
    """stdout at 110+ columns, so tables stay readable when stdout is not a terminal (CI, logs)."""
    return Console(width=max(Console().width, 110))


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/] {message}")
    sys.exit(2)


def exit_on_sigterm() -> None:
    """Make SIGTERM a normal exit so cleanup (releasing the embedded server) runs."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def checked_user(user_id: str, kg_id: str) -> None:
    """Fail with a message naming the field when a user or graph id is not valid."""
    try:
        validate_identifier(user_id, "user_id")
        validate_identifier(kg_id, "kg_id")
    except InvalidInputError as exc:
        fail(str(exc))
