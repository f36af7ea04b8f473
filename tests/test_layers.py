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
