"""Before a benchmark: does every endpoint answer HTTP at all?

One ``GET /v1/models`` per endpoint, all at once, with a short timeout. Any HTTP
answer counts (a 401 or a 404 still shows a server is there; the run's records will
say what it makes of the requests). No answer means every request of a possibly long
run would fail the same way, so the benchmark does not start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx

from kvroute.bench.run_options import BenchEndpoint
from kvroute.bench.scrape import root_url
from kvroute.engines.registry import adapter_registry
from kvroute.errors import EngineError

PROBE_TIMEOUT_S = 5.0


async def _probe(
    client: httpx.AsyncClient, endpoint: BenchEndpoint, timeout_s: float
) -> str | None:
    """None when ``endpoint`` answers; otherwise why it does not."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        await client.get(f"{root_url(endpoint.url)}/v1/models", headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


async def _probe_all(endpoints: Sequence[BenchEndpoint], timeout_s: float) -> list[str | None]:
    async with httpx.AsyncClient() as client:
        return list(await asyncio.gather(*(_probe(client, e, timeout_s) for e in endpoints)))


def check_endpoints(
    endpoints: Sequence[BenchEndpoint], *, timeout_s: float = PROBE_TIMEOUT_S
) -> None:
    """Raise :class:`EngineError` naming the first endpoint that does not answer (a
    ``UsageError`` listing the valid names first, for an unknown ``engine=``)."""
    for endpoint in endpoints:
        if endpoint.engine is not None:
            adapter_registry().get(endpoint.engine)
    for endpoint, problem in zip(
        endpoints, asyncio.run(_probe_all(endpoints, timeout_s)), strict=True
    ):
        if problem is not None:
            raise EngineError(
                f"endpoint {endpoint.name} ({endpoint.url}) does not answer: {problem}",
                hint="start the engine (e.g. kvroute engines up) or fix the URL in "
                f"-e {endpoint.name}=URL; nothing was run",
            )
