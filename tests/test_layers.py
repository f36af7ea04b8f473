"""The package's imports run one way, downward through the layers the README's layout names."""

from __future__ import annotations

import ast

from tests.conftest import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "dreaming_dagster"
LAYERS = [
    {"config.settings", "config.dagster_env", "sql", "storage"},
    {"hubs", "embeddings", "onnx_encoder", "llm", "extraction", "prompts", "dates", "config.runtime"},
    {"ingest", "pipeline", "retrieval", "consolidation", "training", "reembed", "reporting", "memory"},
    {"defs", "service", "cli", "demo", "definitions", ""},
]
# The one arrow upward: the process's default Recaller, built (lazily) beside its default database and embedder.
ALLOWED = {("config.runtime", "retrieval.recaller")}


def layer(module: str) -> int:
    parts = module.split(".")
    for key in (".".join(parts[:2]), parts[0]):
        for index, names in enumerate(LAYERS):
            if key in names:
                return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and the README's layout")


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix("__init__").rstrip(".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dreaming_dagster."):
                target = node.module.removeprefix("dreaming_dagster.")
                if layer(target) > layer(module) and (module, target) not in ALLOWED:
                    upward.append(f"{module} -> {target}")
    assert upward == []


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
