"""Every Python example of the README and the docs runs as written, in the order a reader meets them, against a
fresh memory (the CLI's settings: the test's database and the OpenAI-protocol stub's embeddings)."""

from __future__ import annotations

import re

import dreaming_dagster as dd
from tests.conftest import PROJECT_ROOT

# The pages with Python examples, in reading order: each page's examples build on the ones before.
PAGES = ["README.md", "docs/ingestion.md", "docs/dreaming.md", "docs/retrieval.md", "docs/forgetting.md"]
EXAMPLE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_every_page_with_a_python_example_is_run():
    pages = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
    with_examples = {str(page.relative_to(PROJECT_ROOT)) for page in pages if EXAMPLE.search(page.read_text())}
    assert with_examples == set(PAGES)


def test_the_python_examples_run_as_written(cli_env):
    from dreaming_dagster.process_defaults import reset_defaults

    reset_defaults()  # the CLI's settings, read anew
    namespace: dict = {}
    ran = 0
    for page in PAGES:
        for number, example in enumerate(EXAMPLE.findall((PROJECT_ROOT / page).read_text()), 1):
            exec(compile(example, f"{page}, example {number}", "exec"), namespace)  # noqa: S102 - the docs' own code
            ran += 1
    assert ran == 6
    # The last example erases alice: what the ones before saved and dreamed is gone.
    assert dd.list_pairs("alice").pairs == [] and dd.list_subjects("alice") == []
