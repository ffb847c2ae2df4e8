from __future__ import annotations

from kvroute.gateway.config.diff import config_changes, reload_refusal
from kvroute.gateway.config.gateway import parse_config

BASE = """
backends:
  - {name: a, url: 'http://127.0.0.1:1', engine: vllm}
  - {name: b, url: 'http://127.0.0.1:2', engine: vllm}
keys:
  - {name: k, sha256: %s}
"""
SHA = "a" * 64


def test_changes_are_named_per_item_and_section() -> None:
    old = parse_config(BASE % SHA, "a.yaml")
    new = parse_config(
        (BASE % ("b" * 64)).replace("name: a", "name: c").replace(":2'", ":3'")
        + "limits: {max_in_flight: 3}\n",
        "b.yaml",
    )
    assert config_changes(old, new) == ["backends +c -a ~b", "keys ~k", "limits"]
    assert config_changes(old, old) == []


def test_losing_every_key_is_refused_unless_allowed() -> None:
    old = parse_config(BASE % SHA, "a.yaml")
    open_ = parse_config(BASE.split("keys:", maxsplit=1)[0], "b.yaml")
    meant = parse_config(BASE.split("keys:", maxsplit=1)[0] + "allow_no_keys: true\n", "c.yaml")
    assert "would open the gateway" in (reload_refusal(old, open_) or "")
    assert reload_refusal(old, meant) is None
    assert reload_refusal(open_, old) is None
