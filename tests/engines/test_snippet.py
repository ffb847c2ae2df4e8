"""The backends YAML printed by `kvroute engines up`."""

from __future__ import annotations

import yaml

from kvroute.engines.snippet import backends_yaml
from kvroute.engines.state import EngineRecord


def test_one_backend_per_engine() -> None:
    records = [
        EngineRecord(
            "llamacpp",
            port,
            f"http://127.0.0.1:{port}",
            "SmolLM2-135M-Instruct",
            1,
            2,
            3.0,
            "/tmp/log",
            ("x",),
        )
        for port in (8080, 8081)
    ]
    data = yaml.safe_load(backends_yaml(records))
    assert data == {
        "backends": [
            {
                "name": "llamacpp-8080",
                "engine": "llamacpp",
                "url": "http://127.0.0.1:8080",
                "model": "SmolLM2-135M-Instruct",
            },
            {
                "name": "llamacpp-8081",
                "engine": "llamacpp",
                "url": "http://127.0.0.1:8081",
                "model": "SmolLM2-135M-Instruct",
            },
        ]
    }
