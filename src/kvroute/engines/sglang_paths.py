"""Where ``scripts/install-sglang`` puts SGLang and which model directory it serves.

The version matches the script's pin. SGLang serves the same Hugging Face directory
``scripts/install-vllm`` converts from the GGUF (:func:`vllm_model_dir`). Nothing is
checked at import; each function looks when called and raises :class:`EngineError`
with the install command when something is missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kvroute.engines.paths import cache_dir
from kvroute.errors import EngineError

SGLANG_VERSION = "0.5.23"
"""The ``sglang`` release installed (without its CUDA dependencies) into its own venv."""

INSTALL_HINT = "run `scripts/install-engines sglang` (a virtualenv of ~2.2 GB, a few minutes)"


def sglang_venv_dir(env: Mapping[str, str] | None = None) -> Path:
    """The virtualenv holding SGLang (it may not exist)."""
    return cache_dir(env) / "sglang" / SGLANG_VERSION / "venv"


def sglang_python_path(env: Mapping[str, str] | None = None) -> Path:
    """The Python of a finished SGLang install (the script leaves a stamp file last)."""
    venv = sglang_venv_dir(env)
    python = venv / "bin" / "python"
    if not (venv / ".kvroute-installed").is_file() or not os.access(python, os.X_OK):
        raise EngineError(f"sglang {SGLANG_VERSION} is not installed at {venv}", hint=INSTALL_HINT)
    return python
