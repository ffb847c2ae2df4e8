"""What a reload changes, in words for the log line that records it, and whether it
may. Pure: two :class:`GatewayConfig` in, plain data out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from kvroute.gateway.config.gateway import GatewayConfig

_NAMED = ("backends", "routes", "keys")
"""Sections that are lists of named items: changes are told per name."""


def config_changes(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    """One phrase per change: ``backends +b2 -b0 ~b1``, ``limits``, ``admin key``.
    Names only, never values (key hashes and upstream keys stay out of the log)."""
    out: list[str] = []
    for section in _NAMED:
        phrase = _named_changes(getattr(old, section), getattr(new, section))
        if phrase:
            out.append(f"{section} {phrase}")
    for f in fields(GatewayConfig):
        if f.name in (*_NAMED, "source", "admin_key_sha256"):
            continue
        if getattr(old, f.name) != getattr(new, f.name):
            out.append(f.name)
    if old.admin_key_sha256 != new.admin_key_sha256:
        out.append("admin key")
    return out


def _named_changes(old: Sequence[Any], new: Sequence[Any]) -> str:
    before = {item.name: item for item in old}
    after = {item.name: item for item in new}
    parts = [f"+{n}" for n in after if n not in before]
    parts += [f"-{n}" for n in before if n not in after]
    parts += [f"~{n}" for n in after if n in before and before[n] != after[n]]
    return " ".join(parts)


def reload_refusal(old: GatewayConfig, new: GatewayConfig) -> str | None:
    """Why ``new`` may not replace ``old``, or None. A config that lost its keys would
    open a gateway that was closed: refused unless it says ``allow_no_keys: true``."""
    if old.keys and not new.keys and not new.allow_no_keys:
        return (
            f"the new config has no keys while the running one has {len(old.keys)}: "
            "the reload would open the gateway to anyone who reaches it "
            "(keep 'keys:', or set 'allow_no_keys: true' to mean it)"
        )
    return None
