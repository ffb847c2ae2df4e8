"""The adapters' HTTP edge: requests through a caller's ``httpx.AsyncClient``, failures
as :class:`EngineError`, and checked reads of the JSON engines answer with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from kvroute.engines.base import Health, HealthState
from kvroute.engines.metrics_text import Metrics, parse_metrics
from kvroute.errors import EngineError
from kvroute.types import JSONValue

DEFAULT_TIMEOUT_S = 10.0
"""Probes and scrapes of a local engine answer in milliseconds; this is a hang guard."""


class EngineHTTPError(EngineError):
    """The engine answered with an HTTP error status (kept in ``status_code``)."""

    def __init__(self, message: str, *, status_code: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status_code = status_code


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json_body: JSONValue = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> httpx.Response:
    """Send one request; raise :class:`EngineError` for a network failure and
    :class:`EngineHTTPError` for a status of 400 or more."""
    try:
        response = await client.request(method, url, json=json_body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EngineError(f"{method} {url} failed: {exc!r}") from exc
    if response.status_code >= 400:
        excerpt = response.text[:300].strip()
        raise EngineHTTPError(
            f"{method} {url} answered HTTP {response.status_code}: {excerpt}",
            status_code=response.status_code,
        )
    return response


async def get_json(
    client: httpx.AsyncClient, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> JSONValue:
    """GET ``url`` and decode its JSON body."""
    response = await request(client, "GET", url, timeout_s=timeout_s)
    try:
        return response.json()
    except ValueError:
        raise EngineError(f"GET {url} did not answer JSON: {response.text[:200]!r}") from None


async def get_metrics(
    client: httpx.AsyncClient, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Metrics:
    """Scrape and parse ``{base_url}/metrics``."""
    response = await request(client, "GET", f"{base_url}/metrics", timeout_s=timeout_s)
    return parse_metrics(response.text)


def as_mapping(value: JSONValue, where: str) -> Mapping[str, Any]:
    """``value`` as a JSON object, or :class:`EngineError` naming ``where``."""
    if not isinstance(value, Mapping):
        raise EngineError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def as_list(value: JSONValue, where: str) -> list[Any]:
    """``value`` as a JSON array, or :class:`EngineError` naming ``where``."""
    if not isinstance(value, list):
        raise EngineError(f"{where}: expected a JSON array, got {type(value).__name__}")
    return value


def int_field(obj: Mapping[str, Any], key: str, where: str) -> int:
    """``obj[key]`` as an int (JSON numbers such as ``12.0`` accepted), else EngineError."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EngineError(f"{where}: field '{key}' is missing or not a number ({value!r})")
    if isinstance(value, float) and not value.is_integer():
        raise EngineError(f"{where}: field '{key}' is not a whole number ({value!r})")
    return int(value)


def optional_int_field(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    """Like :func:`int_field` but None when the key is absent or null."""
    if obj.get(key) is None:
        return None
    return int_field(obj, key, where)


def counter_value(metrics: Metrics, name: str) -> int | None:
    """A counter summed over its label sets, as a whole number; None when absent."""
    total = metrics.total(name)
    return None if total is None else round(total)


def model_ids(body: JSONValue, where: str) -> list[str]:
    """The ``data[].id`` list of an OpenAI ``/v1/models`` answer."""
    data = as_list(as_mapping(body, where).get("data"), f"{where} data")
    ids: list[str] = []
    for item in data:
        model_id = as_mapping(item, f"{where} data[]").get("id")
        if not isinstance(model_id, str):
            raise EngineError(f"{where}: a model entry has no string 'id'")
        ids.append(model_id)
    return ids


def openai_usage(body: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(prompt_tokens, cached_tokens)`` from an OpenAI ``usage`` object, or None when
    the body has no usage or no ``prompt_tokens_details.cached_tokens``."""
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, Mapping) or details.get("cached_tokens") is None:
        return None
    where = "response usage"
    return int_field(usage, "prompt_tokens", where), int_field(details, "cached_tokens", where)


class HttpEngine:
    """What every adapter does the same way: its URL, its client, ``/health`` and
    ``/v1/models``. Subclasses name the engine and say whether their ``/health``
    answers 503 while the model loads (``LOADING_ON_503``)."""

    ENGINE = ""
    LOADING_ON_503 = False

    def __init__(self, base_url: str, *, client: httpx.AsyncClient) -> None:
        self._base_url = base_url.rstrip("/")
        self._client = client

    @property
    def engine(self) -> str:
        return self.ENGINE

    @property
    def base_url(self) -> str:
        return self._base_url

    async def health(self) -> Health:
        """``/health`` read as a :class:`Health`; never raises."""
        try:
            response = await self._client.get(f"{self._base_url}/health", timeout=DEFAULT_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return Health(HealthState.UNREACHABLE, f"{type(exc).__name__}: {exc}")
        if response.status_code == 200:
            return Health(HealthState.READY, "ok")
        if response.status_code == 503 and self.LOADING_ON_503:
            return Health(HealthState.LOADING, response.text[:200])
        return Health(HealthState.UNHEALTHY, f"HTTP {response.status_code}: {response.text[:200]}")

    async def models(self) -> list[str]:
        url = f"{self._base_url}/v1/models"
        return model_ids(await get_json(self._client, url), url)
