"""``python -m dreaming_dagster.cli``: the ``dreaming`` command."""

from dreaming_dagster.cli import main

main()
