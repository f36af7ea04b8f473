"""The package's imports run one way, downward through the layers the README's layout names."""

from __future__ import annotations

import ast

from tests.conftest import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "dreaming_dagster"
# Bottom to top. A unit is a folder of the package or a top-level module.
LAYERS = [
    {"config", "sql", "storage", "process_groups"},  # settings, SQL, connections,
    # records, locks, process groups
    {"hubs", "embeddings", "onnx_encoder", "encoder_delta", "llm", "extraction", "prompts", "dates"},  # models and parsers
    {"process_defaults", "dagster_env"},  # the process's defaults and Dagster's environment, from the layers below
    {"ingest", "retrieval", "pipeline", "consolidation", "memory", "training", "reembed", "reporting"},  # the work
    {"defs", "instance", "service", "cli", "demo", "definitions", ""},  # what users run
]
# Arrows allowed against the rules, each with why. Empty: every shared need lives below its users.
ALLOWED: dict[tuple[str, str], str] = {}


def unit(module: str) -> str:
    return module.split(".")[0]


def layer(module: str) -> int:
    for index, names in enumerate(LAYERS):
        if unit(module) in names:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and the README's layout")


def import_arrows() -> set[tuple[str, str]]:
    """(importing module, imported module) for every import of the package's own modules."""
    arrows = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix("__init__").rstrip(".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dreaming_dagster."):
                target = node.module.removeprefix("dreaming_dagster.")
                folder = PACKAGE.joinpath(*target.split("."))
                for alias in node.names:  # `from dreaming_dagster.config import settings` imports config.settings
                    submodule = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                    arrows.add((module, f"{target}.{alias.name}" if submodule else target))
    return arrows


def unit_cycle(arrows: set[tuple[str, str]]) -> list[str]:
    """A cycle between units (``[a, b, …, a]``), or [] when the units' imports form no cycle."""
    graph: dict[str, set[str]] = {}
    for source, target in arrows:
        if unit(source) != unit(target) and (unit(source), unit(target)) not in ALLOWED:
            graph.setdefault(unit(source), set()).add(unit(target))
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return []
        for following in sorted(graph.get(node, ())):
            if found := visit(following, [*path, node]):
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        if found := visit(start, []):
            return found
    return []


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{source} -> {target}" for source, target in sorted(import_arrows())
              if layer(target) > layer(source) and (unit(source), unit(target)) not in ALLOWED]
    assert upward == []


def test_no_two_units_import_each_other_even_through_others():
    assert unit_cycle(import_arrows()) == []


def test_an_added_cycle_is_caught():
    # ingest below pipeline: one arrow back (ingest importing a pipeline module) closes a cycle.
    assert unit_cycle(import_arrows() | {("ingest.embedding", "pipeline.batches")})[0] in {"ingest", "pipeline"}


def test_every_package_the_code_imports_is_a_declared_dependency():
    """A third-party import that installs only because another package pulls it in breaks the day that package
    stops: each one must be named in pyproject.toml (by its distribution)."""
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=\[ ;]", dependency, maxsplit=1)[0].lower().replace("_", "-")
                for dependency in project["dependencies"]}
    owners = packages_distributions()
    imported, alternatives = set(), set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # `try: import a` / `except ImportError: import b`: whichever is there
            if isinstance(node, ast.Try) and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError"
                                                 for h in node.handlers):
                alternatives |= {alias.name.split(".")[0] for part in (node.body, *(h.body for h in node.handlers))
                                 for statement in part if isinstance(statement, ast.Import)
                                 for alias in statement.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    undeclared = {}
    for module in sorted(imported - alternatives - set(sys.stdlib_module_names) - {"dreaming_dagster", "__future__"}):
        distributions = {d.lower().replace("_", "-") for d in owners.get(module, [])}
        if distributions and not distributions & declared:
            undeclared[module] = sorted(distributions)
    assert undeclared == {}


def test_no_two_modules_of_the_package_share_a_name_and_none_is_too_big_to_hold():
    """A newcomer finds a behaviour by its module's name: no name is used twice, except the files Dagster's own
    layout names in each defs/<domain>/ folder (assets, jobs, sensors, checks); and no module passes 600 lines."""
    from collections import Counter

    dagster_layout = {"assets.py", "jobs.py", "sensors.py", "checks.py", "__init__.py", "__main__.py"}
    modules = [path for path in PACKAGE.rglob("*.py")]
    names = Counter(path.name for path in modules if path.name not in dagster_layout)
    assert [name for name, count in names.items() if count > 1] == []
    assert [path.relative_to(PACKAGE) for path in modules if len(path.read_text().splitlines()) > 600] == []


def test_at_most_two_modules_of_the_code_location_know_how_it_is_partitioned():
    """The layout (a partition a user, or hash buckets) is decided in defs/layout.py and recorded by
    defs/partitioning_switch.py (the switch); every other module of defs/ asks a Layout it is handed or reads off the
    definitions, so no asset, job or sensor branches on a global."""
    knowing = set()
    for path in (PACKAGE / "defs").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        called = {node.attr if isinstance(node, ast.Attribute) else node.id for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute | ast.Name)}
        if "dreaming_dagster.pipeline.buckets" in names or {"read_layout", "deployment_layout"} & called:
            knowing.add(path.relative_to(PACKAGE).as_posix())
        assert "global" not in {type(node).__name__.lower() for node in ast.walk(tree)}, path
    assert knowing == {"defs/layout.py", "defs/partitioning_switch.py"}
