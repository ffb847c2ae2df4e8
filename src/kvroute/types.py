"""Shared aliases used across kvroute. Kept tiny on purpose: one vocabulary, no logic."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

TokenIds: TypeAlias = npt.NDArray[np.uint32]
"""Token ids of one prompt, in order."""

BlockHashes: TypeAlias = npt.NDArray[np.uint64]
"""Chained block hashes of one prompt: element i covers the whole prefix up to block i."""

JSONValue: TypeAlias = Any
"""A value decoded from JSON (dict, list, str, int, float, bool or None)."""

Message: TypeAlias = dict[str, Any]
"""One OpenAI-style chat message (role, content, tool_calls, ...)."""
