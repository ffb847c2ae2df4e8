"""The backends YAML that ``kvroute engines up`` prints for the gateway config, and the
cache settings a recorded engine was started with. Pure."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import yaml

from kvroute.engines.state import EngineRecord

_CACHE_FLAGS = {
    "vllm": {"--block-size": "block_size_tokens"},
    "llamacpp": {
        "--parallel": "slots",
        "-np": "slots",
        "--ctx-size": "capacity_tokens",
        "-c": "capacity_tokens",
        "--cache-ram": "cache_ram_mib",
    },
}
"""Per engine, the flags that shape its KV cache and their keys in a backend's ``cache:``."""


def cache_settings(record: EngineRecord) -> dict[str, int]:
    """The backend ``cache:`` settings (docs/gateway.md) of the engine ``record`` started,
    read from its command line: only the flags it was given, so the rest keep the
    gateway's defaults (which are the engines')."""
    flags = _CACHE_FLAGS.get(record.engine, {})
    argv = record.argv
    out: dict[str, int] = {}
    for flag, value in itertools.pairwise(argv):
        key = flags.get(flag)
        if key is not None and value.lstrip("-").isdigit():
            out[key] = int(value)
    return out


def backends_yaml(records: Sequence[EngineRecord]) -> str:
    """A ``backends:`` list, one entry per engine: name, engine, url, model, and the cache
    settings it runs with (the gateway's cache view must model that engine)."""
    backends = []
    for r in records:
        entry: dict[str, object] = {
            "name": r.name,
            "engine": r.engine,
            "url": r.base_url,
            "model": r.model_name,
        }
        cache = cache_settings(r)
        if cache:
            entry["cache"] = cache
        backends.append(entry)
    return yaml.safe_dump({"backends": backends}, sort_keys=False)
