"""docs/openapi.yaml for the tests: the description itself, its schemas as validators,
and a keep-alive HTTP/1.1 client on one raw socket (so a test can tell whether the
gateway kept the connection usable: httpx would quietly open another)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httptools
import jsonschema
import orjson
import yaml
from hypothesis import strategies as st
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
SPEC_URI = "urn:kvroute:openapi"
HTTP_METHODS = ("get", "head", "post", "put", "patch", "delete", "options")


@cache
def spec() -> dict[str, Any]:
    data = yaml.safe_load(SPEC_PATH.read_text())
    assert isinstance(data, dict)
    return data


def operations() -> list[tuple[str, str]]:
    """(path, METHOD) for every operation described."""
    return [
        (path, method.upper())
        for path, item in spec()["paths"].items()
        for method in item
        if method in HTTP_METHODS
    ]


def allowed(path: str) -> set[str]:
    """The methods ``path`` takes: those described, and HEAD wherever GET is."""
    methods = {m for p, m in operations() if p == path}
    return methods | {"HEAD"} if "GET" in methods else methods


def validator(ref: str) -> jsonschema.protocols.Validator:
    """A validator for the schema at ``ref`` (``#/components/schemas/Error``), its
    ``$ref``s resolved inside the description."""
    registry: Registry[Any] = Registry().with_resource(
        SPEC_URI, Resource.from_contents(spec(), default_specification=DRAFT202012)
    )
    return jsonschema.Draft202012Validator({"$ref": f"{SPEC_URI}{ref}"}, registry=registry)


def documented_statuses(path: str, method: str) -> set[int]:
    responses = spec()["paths"][path][method.lower()]["responses"]
    return {int(status) for status in responses}


def request_schema(path: str) -> dict[str, Any]:
    """The JSON body schema of ``POST path``, standalone (``components`` carried along,
    so its ``$ref``s resolve in a generator that knows only this document)."""
    body = spec()["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return {**body["schema"], "components": spec()["components"]}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class _Parsed:
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    done: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True


class RawClient:
    """One HTTP/1.1 connection, never reopened: :meth:`send` raises ``ConnectionError``
    if the gateway closed it before a whole answer came."""

    def __init__(self, port: int, timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._leftover = b""

    def close(self) -> None:
        self.sock.close()

    def send(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Answer:
        lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        return self._read(head_only=method == "HEAD")

    def _read(self, head_only: bool) -> Answer:
        parsed = _Parsed()
        parser = httptools.HttpResponseParser(parsed)
        if head_only:
            # A HEAD answer's Content-Length describes the body a GET would get: the
            # answer ends with its head.
            data = self._leftover
            while b"\r\n\r\n" not in data:
                piece = self.sock.recv(65536)
                if not piece:
                    raise ConnectionError("the gateway closed the connection mid-answer")
                data += piece
            head, _, self._leftover = data.partition(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines)
            }
            keep_alive = headers.get("connection", "").lower() != "close"
            return Answer(int(status_line.split()[1]), headers, b"", keep_alive)
        data, self._leftover = self._leftover, b""
        if data:
            parser.feed_data(data)
        while not parsed.done:
            piece = self.sock.recv(65536)
            if not piece:
                raise ConnectionError("the gateway closed the connection mid-answer")
            parser.feed_data(piece)
        keep_alive = parsed.headers.get("connection", "").lower() != "close"
        return Answer(parser.get_status_code(), parsed.headers, bytes(parsed.body), keep_alive)


# -- generating values from the description's schemas ------------------------------------
#
# A small JSON Schema -> hypothesis strategy translation for the keywords this
# description uses. hypothesis-jsonschema (0.23.1, its last release) fails on the
# hypothesis this project pins (``'many' object has no attribute 'more'``), and
# schemathesis would add ten packages to ``.[dev]``; this is ~80 lines and fails loudly
# on a keyword it does not know, so the description cannot outgrow it unnoticed.

_ANNOTATIONS = {"description", "summary", "title", "example"}
_KNOWN = {
    "$ref", "allOf", "oneOf", "anyOf", "not", "const", "enum", "type", "properties",
    "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "minimum", "maximum",
}  # fmt: skip

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=16),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for part in parts:
        assert part.get("type", "object") == "object", "allOf of objects only"
        merged["properties"].update(part.get("properties", {}))
        merged["required"] += part.get("required", [])
    return merged


def from_schema(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid by ``schema`` (``$ref``s into ``root``); objects get a few extra
    members where ``additionalProperties`` allows them."""
    schema = _resolve(schema, root)
    unknown = set(schema) - _KNOWN - _ANNOTATIONS - {"components"}
    if unknown:
        raise ValueError(f"the generator does not know {sorted(unknown)}: teach openapi.py")
    if "allOf" in schema:
        return from_schema(_merge([_resolve(p, root) for p in schema["allOf"]]), root)
    if "oneOf" in schema or "anyOf" in schema:
        options = schema.get("oneOf") or schema["anyOf"]
        return st.one_of([from_schema(o, root) for o in options])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type", "object" if "properties" in schema else None)
    if types is None:
        return json_values
    if isinstance(types, list):
        return st.one_of([from_schema({**schema, "type": t}, root) for t in types])
    strategy = _typed(types, schema, root)
    if "not" in schema:
        banned = schema["not"]
        assert set(banned) == {"const"}, "only not: {const: ...} is supported"
        strategy = strategy.filter(lambda v: v != banned["const"])
    return strategy


def _typed(kind: str, schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        least = schema.get("minLength", 0)
        return st.text(min_size=least, max_size=least + 12)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(
            schema.get("minimum"), schema.get("maximum"), allow_nan=False, allow_infinity=False
        )
    if kind == "array":
        items = from_schema(schema["items"], root) if "items" in schema else json_values
        least = schema.get("minItems", 0)
        return st.lists(items, min_size=least, max_size=schema.get("maxItems", least + 3))
    assert kind == "object", kind
    props = {k: from_schema(v, root) for k, v in schema.get("properties", {}).items()}
    required = set(schema.get("required", []))
    known = st.fixed_dictionaries(
        {k: v for k, v in props.items() if k in required},
        optional={k: v for k, v in props.items() if k not in required},
    )
    if schema.get("additionalProperties", True) is False:
        return known
    extra_names = st.text(min_size=1, max_size=8).filter(lambda k: k not in props)
    extras = st.dictionaries(extra_names, json_values, max_size=2)
    return st.tuples(known, extras).map(lambda pair: {**pair[1], **pair[0]})
