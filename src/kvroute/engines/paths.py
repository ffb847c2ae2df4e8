"""Where ``scripts/install-engines`` puts the real engines and the default model.

Everything lives under :func:`cache_dir` (``$KVROUTE_CACHE``, else
``${XDG_CACHE_HOME:-~/.cache}/kvroute``); the versions here match the script's pins.
Nothing is checked at import; each function looks when called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kvroute.errors import EngineError
from kvroute.trace.tokenizer import cache_dir, default_model_path

__all__ = ["LLAMA_CPP_VERSION", "cache_dir", "default_model_path", "llama_server_path"]

LLAMA_CPP_VERSION = "0.3.36"
"""The llama-cpp-python release whose vendored llama.cpp builds ``llama-server``."""


def llama_server_path(env: Mapping[str, str] | None = None) -> Path:
    """The installed ``llama-server`` binary.

    Raises :class:`~kvroute.errors.EngineError` with an install hint when it is missing
    or not executable.
    """
    path = cache_dir(env) / "llama.cpp" / LLAMA_CPP_VERSION / "bin" / "llama-server"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise EngineError(
            f"llama-server {LLAMA_CPP_VERSION} is not installed at {path}",
            hint="run `scripts/install-engines llamacpp` (builds it once, several minutes)",
        )
    return path
