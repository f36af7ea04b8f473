"""JSON schemas for structured output, derived from the pydantic models that validate the answers, so a
shape is declared once. OpenAI's strict mode wants every property required, no extra properties, no
``$ref`` and none of the string-length keywords; pydantic validates lengths on the answer anyway."""

from __future__ import annotations

import copy
import typing
from typing import Any

from pydantic import BaseModel, create_model

# Keywords strict mode refuses or ignores; the answer's validation (pydantic) enforces them.
_DROPPED = {"title", "default", "minLength", "maxLength", "minItems", "pattern", "format"}


def strict_schema(model: type[BaseModel]) -> dict:
    """``model``'s JSON schema in OpenAI strict form: references inlined, every object closed and fully
    required. A field's ``description`` and ``enum`` stay (the model reads them)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(copy.deepcopy(definitions[node["$ref"].rsplit("/", 1)[-1]]))
        out = {key: walk(value) for key, value in node.items() if key not in _DROPPED}
        if out.get("type") == "object" and "properties" in out:
            out["required"] = list(out["properties"])
            out["additionalProperties"] = False
        return out

    return walk(schema)


def flat_union_model(name: str, variants: typing.Sequence[type[BaseModel]], tag: str) -> type[BaseModel]:
    """One model with every field of ``variants`` (a tagged union), each optional but the tag: strict mode
    has no discriminated unions, so a list of mixed items is asked for as one flat shape with unused fields
    null, then each item is validated as its own variant."""
    fields: dict[str, Any] = {}
    tags = []
    for variant in variants:
        for field_name, field in variant.model_fields.items():
            if field_name == tag:
                tags.extend(typing.get_args(field.annotation))
                continue
            fields.setdefault(field_name, (typing.Optional[field.annotation], None))  # noqa: UP045
    fields[tag] = (typing.Literal[tuple(tags)], ...)
    return create_model(name, **fields)
