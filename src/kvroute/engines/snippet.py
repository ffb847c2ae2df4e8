"""The backends YAML that ``kvroute engines up`` prints for the gateway config. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from kvroute.engines.state import EngineRecord


def backends_yaml(records: Sequence[EngineRecord]) -> str:
    """A ``backends:`` list, one entry per engine: name, engine, url, model."""
    backends = [
        {"name": r.name, "engine": r.engine, "url": r.base_url, "model": r.model_name}
        for r in records
    ]
    return yaml.safe_dump({"backends": backends}, sort_keys=False)
