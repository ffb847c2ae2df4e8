"""Follow one request through the gateway's code: which kvroute modules it enters, in
order, and how often it comes back to a module it had left.

Starts the gateway in this process over the stub upstream (``gateway_stub.py``), sends
one warm-up request, then traces the next one with ``sys.setprofile`` from the first
call of the completion path (``CompletionPipeline.__call__``; ``Gateway._complete`` in
trees from before the pipeline) to the end of the client's read. Only calls into
``src/kvroute`` made by the task that runs it count (not other tasks, such
as health checks, nor the socket callbacks that feed it); consecutive calls within one
module are one visit. Reported:
the modules entered (distinct), the visits, and the returns (visits to a module
already visited before: visits minus modules).

A coroutine that resumes after an ``await`` (the task woken by the upstream's answer)
raises a "call" event for every frame of its stack again, so the visits above count
each suspension once per module on the stack. ``calls`` and ``call_returns`` count
the same way over fresh calls only (a frame seen before is a resumption, left out):
the order the code calls into modules. ``stage_calls`` are the modules the entry
function itself calls, in order (consecutive calls into one module merged): its
stages; ``closers`` the modules of the functions the response runs once written (the
end-of-request hooks). ``all_calls`` counts every Python and C function call the process
makes from the first call of the entry to the end of the client's read, in any task or
callback and any module (the client's own included): a cost proxy that, unlike CPU
time, does not move with the machine's load.

Usage (any tree; run it with that tree's ``src`` first on the path):

    PYTHONPATH=src .venv/bin/python bench/request_path.py [--stream] [--cache-aware] [--show]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_stub import _StubProtocol

_ENTRIES = {("kvroute.gateway.pipeline", "__call__"), ("kvroute.gateway.app", "_complete")}
"""Where a completion request's own path begins (this tree's, or an older tree's)."""


def _module_of(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    at = path.rfind("/kvroute/")
    if at < 0 or "/src/kvroute/" not in path:
        return None
    name = path[at + 1 :].removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _parse_config(text: str, path: str) -> Any:
    try:
        from kvroute.gateway.config.gateway import parse_config
    except ImportError:  # a tree from before gateway/config/ (to compare with)
        from kvroute.gateway.config import parse_config  # type: ignore[attr-defined,no-redef]
    return parse_config(text, path)


async def _trace(
    stream: bool, cache_aware: bool
) -> tuple[list[str], list[str], list[str], list[str], int]:
    from kvroute.gateway.app import Gateway

    loop = asyncio.get_running_loop()
    stub = await loop.create_server(lambda: _StubProtocol(16, 0.0), "127.0.0.1", 0)
    port = stub.sockets[0].getsockname()[1]
    route = "routes: [{name: r, pool: default, policy: cache_aware}]\n" if cache_aware else ""
    text = f"backends: [{{name: b1, url: 'http://127.0.0.1:{port}', engine: vllm}}]\n" + route
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gw.yaml"
        path.write_text(text)
        gateway = Gateway(_parse_config(text, str(path)), config_path=path)
        gw_port = await gateway.start("127.0.0.1", 0)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hello there"}],
            "stream": stream,
            "max_tokens": 16,
        }
        visits: list[str] = []
        calls: list[str] = []
        frames: set[FrameType] = set()  # held until the end: ids are not reused meanwhile
        stage_calls: list[str] = []
        closers: list[str] = []
        entry: FrameType | None = None
        task: asyncio.Task[Any] | None = None

        all_calls = 0

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal task, entry, all_calls
            if entry is not None and event in ("call", "c_call"):
                all_calls += 1
            if event != "call":
                return
            module = _module_of(frame)
            if module is None:
                return
            try:
                current = asyncio.current_task()
            except RuntimeError:
                return
            if task is None:
                if (module, frame.f_code.co_name) not in _ENTRIES:
                    return
                task, entry = current, frame
                outer = frame.f_back  # its callers (server, middlewares) only resume later
                while outer is not None:
                    frames.add(outer)
                    outer = outer.f_back
            if current is not task:  # other tasks (health checks) and socket callbacks
                return
            if not visits or visits[-1] != module:
                visits.append(module)
            if frame not in frames:
                frames.add(frame)
                if not calls or calls[-1] != module:
                    calls.append(module)
                caller = frame.f_back
                if caller is entry and (not stage_calls or stage_calls[-1] != module):
                    stage_calls.append(module)
                if (
                    caller is not None
                    and caller.f_code.co_name == "close"
                    and (_module_of(caller) in ("kvroute.gateway.types", "kvroute.http.messages"))
                ):
                    closers.append(module)

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw_port}") as client:
            for attempt in range(2):
                if attempt == 1:
                    sys.setprofile(profile)
                r = await client.post("/v1/chat/completions", json=body)
                sys.setprofile(None)
                assert r.status_code == 200, r.text
        await gateway.stop(0)
    stub.close()
    return visits, calls, stage_calls, closers, all_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true", help="a streamed request")
    parser.add_argument("--cache-aware", action="store_true", help="a cache_aware route")
    parser.add_argument("--show", action="store_true", help="print the fresh calls in order")
    args = parser.parse_args()
    visits, calls, stage_calls, closers, all_calls = asyncio.run(
        _trace(args.stream, args.cache_aware)
    )
    if args.show:
        print("\n".join(calls), file=sys.stderr)
    modules = sorted(set(visits))
    print(
        json.dumps(
            {
                "stream": args.stream,
                "cache_aware": args.cache_aware,
                "modules": len(modules),
                "visits": len(visits),
                "returns": len(visits) - len(modules),
                "calls": len(calls),
                "call_returns": len(calls) - len(set(calls)),
                "stage_calls": stage_calls,
                "closers": closers,
                "all_calls": all_calls,
                "module_names": modules,
            }
        )
    )


if __name__ == "__main__":
    main()
