"""`dreaming ranker`: the retrieval ranker's models."""

from __future__ import annotations

from pathlib import Path

import click

from dreaming_dagster.process_defaults import default_embedder


@click.group()
def ranker() -> None:
    """The retrieval ranker's models."""


@ranker.command("train-question-type")
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="LongMemEval-format file (default: the shared oracle file).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the classifier (default: the file shipped in the package).")
@click.option("--seed", default=0, show_default=True)
def train_question_type(dataset: Path | None, out: Path | None, seed: int) -> None:
    """Train the question-type classifier recall uses to fill the ranker's question-type features."""
    from dreaming_dagster.ingest.readers import default_dataset_path
    from dreaming_dagster.retrieval.question_type import SHIPPED_CLASSIFIER, train_from_longmemeval

    report = train_from_longmemeval(dataset or default_dataset_path(), default_embedder(),
                                    out or SHIPPED_CLASSIFIER, seed=seed)
    per_type = ", ".join(f"{name} {value:.3f}" for name, value in report.per_type.items())
    click.echo(f"{report.questions} questions · 5-fold accuracy {report.accuracy:.3f} ({per_type}) · "
               f"wrote {report.path}")


COMMANDS = (ranker,)
