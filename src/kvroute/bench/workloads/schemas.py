"""Random JSON schemas of a given nesting depth, and instances that satisfy them.

Used for tool parameter schemas (``agent``) and structured-output requests (``json``).
Depth 1 is an object of scalar fields; each further level nests one object (or an
array of objects) inside. Every object lists all its properties as ``required`` and
forbids others, so a valid answer is unambiguous.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvroute.bench.workloads.text import TextSource

_FIELDS = [
    "name",
    "id",
    "title",
    "status",
    "amount",
    "price",
    "quantity",
    "city",
    "country",
    "email",
    "phone",
    "date",
    "code",
    "label",
    "kind",
    "score",
    "rank",
    "owner",
    "total",
    "notes",
    "reason",
    "level",
    "unit",
    "region",
    "version",
]
_SCALARS = ("string", "integer", "number", "boolean")


def make_schema(rng: np.random.Generator, depth: int, width: int = 3) -> dict[str, Any]:
    """An object schema nested ``depth`` levels deep with ``width`` properties per level."""
    names = [str(n) for n in rng.choice(_FIELDS, size=min(width, len(_FIELDS)), replace=False)]
    props: dict[str, Any] = {}
    for i, name in enumerate(names):
        if depth > 1 and i == 0:
            inner = make_schema(rng, depth - 1, width)
            props[name] = (
                inner
                if rng.random() < 0.5
                else {"type": "array", "items": inner, "minItems": 1, "maxItems": 3}
            )
        else:
            props[name] = {"type": str(rng.choice(_SCALARS))}
    return {"type": "object", "properties": props, "required": names, "additionalProperties": False}


def example_of(schema: dict[str, Any], text: TextSource) -> Any:
    """An instance that validates against a schema made by :func:`make_schema`."""
    kind = schema["type"]
    rng = text.rng
    if kind == "object":
        return {k: example_of(v, text) for k, v in schema["properties"].items()}
    if kind == "array":
        return [example_of(schema["items"], text) for _ in range(int(rng.integers(1, 3)))]
    if kind == "integer":
        return int(rng.integers(0, 10_000))
    if kind == "number":
        return round(float(rng.uniform(0, 1000)), 2)
    if kind == "boolean":
        return bool(rng.random() < 0.5)
    return text.words(int(rng.integers(1, 4))).rstrip(".")


def schema_depth(schema: dict[str, Any]) -> int:
    """Object nesting depth of ``schema`` (arrays of objects count as their items)."""
    kind = schema.get("type")
    if kind == "array":
        return schema_depth(schema["items"])
    if kind != "object":
        return 0
    return 1 + max((schema_depth(v) for v in schema["properties"].values()), default=0)
