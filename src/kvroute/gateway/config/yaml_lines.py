"""YAML with line numbers: mappings remember where each key was, so config errors can
point at ``file:line``. Duplicate keys are an error (PyYAML silently keeps the last)."""

from __future__ import annotations

from typing import Any

import yaml

from kvroute.errors import InputError


class LineDict(dict[str, Any]):
    """A mapping from YAML, with ``line`` (where it starts) and ``key_lines``."""

    line: int
    key_lines: dict[str, int]


def load_yaml(text: str, path: str) -> Any:
    """Parse ``text``; raise :class:`InputError` with the line for syntax errors and
    duplicate keys. Mappings come back as :class:`LineDict` (1-based lines)."""

    class Loader(yaml.SafeLoader):
        pass

    def construct(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
        out = LineDict()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise InputError(f"keys must be strings, got {key!r}", path=path, line=line)
            if key in out:
                raise InputError(f"duplicate key '{key}'", path=path, line=line)
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_lines[key] = line
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct)
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {exc.problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path=path) from None
