"""A schema-driven fuzzer: requests generated from docs/openapi.yaml (hypothesis, through
openapi.py's schema translation) — bodies valid by the description, the same bodies with one
member broken or removed, every described path with methods, queries and keys drawn
at random — sent over one kept-alive connection. Whatever was sent:

- never a 5xx the gateway caused (a 5xx is allowed only where the description says the
  gateway sends one on its own, which these inputs never trigger);
- every error the gateway produces is the description's ``Error``; an engine's 4xx
  (``x-kvroute-backend`` set) at least OpenAI's ``{"error": {"message", "type"}}``;
- the connection stays usable: no answer closes it, and ``GET /health`` on it still
  answers 200.

Two parts: every operation against a fake upstream (no engine is needed to route,
refuse or authenticate), and the completion bodies against a real llama-server
(``llamacpp``), the only way to learn which shapes an engine answers with a 500.
Bounded: 250 + 120 examples (~20 + ~40 s on a busy 2-core box), ``max_tokens``
capped at 4 in the engine part, no shrinking.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, RunningGateway, running_gateway
from gateway.openapi import (
    Answer,
    RawClient,
    from_schema,
    json_values,
    operations,
    request_schema,
    validator,
)
from gateway.test_app import keyed_config
from kvroute.engines.state import EngineRecord

COMPLETIONS = ("/v1/chat/completions", "/v1/completions")
MODEL = "SmolLM2-135M-Instruct"
KEYS = {
    "none": {},
    "alice": {"authorization": "Bearer sk-alice"},  # may use model m only
    "bob": {"authorization": "Bearer sk-bob"},  # 2 requests a minute
    "admin": {"authorization": "Bearer sk-admin"},
    "wrong": {"authorization": "Bearer sk-nobody"},
    "basic": {"authorization": "Basic Zm9vOmJhcg=="},
    "empty": {"authorization": "Bearer "},
}


def _paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member and item of ``value``, as the keys leading to it."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths_in(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths_in(item, (*prefix, i))
    return found


@st.composite
def broken(draw: st.DrawFn, valid: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A valid body with one member or item replaced by any JSON value, or removed."""
    body = copy.deepcopy(draw(valid))
    where = draw(st.sampled_from(_paths_in(body)))
    parent: Any = body
    for key in where[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        del parent[where[-1]]
    else:
        parent[where[-1]] = draw(json_values)
    return body


@cache
def _valid(path: str, engine: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies valid by the description; for the engine with its model and at most 4
    tokens to generate (what an example costs, whatever was drawn)."""
    schema = copy.deepcopy(request_schema(path))
    if engine:
        common = schema["components"]["schemas"]["CommonFields"]["properties"]
        for name in ("max_tokens", "max_completion_tokens"):
            common[name]["maximum"] = 4
        return from_schema(schema, schema).map(
            lambda body: {**body, "model": MODEL, "max_tokens": body.get("max_tokens", 4)}
        )
    models = st.sampled_from(["m", "other"]) | st.text(max_size=8)
    return st.tuples(from_schema(schema, schema), models).map(lambda p: {**p[0], "model": p[1]})


@cache
def _bodies(path: str, engine: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Valid bodies, and valid bodies with one member broken (for the engine, still
    at most 4 tokens: a broken body without a limit would generate 2,048)."""
    valid = _valid(path, engine)
    bodies = st.one_of(valid, broken(valid))
    return bodies.map(_at_most_4_tokens) if engine else bodies


def _at_most_4_tokens(body: dict[str, Any]) -> dict[str, Any]:
    body = dict(body)
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 4:
            body[name] = 4  # a non-integer stays: that is the engine's to refuse
    if "max_tokens" not in body:
        body["max_tokens"] = 4
    return body


def check(answer: Answer, client: RawClient, sent: str) -> None:
    where = f"{sent} -> {answer.status} {answer.body[:300]!r}"
    event(f"status {answer.status}")  # --hypothesis-show-statistics: what was reached
    assert answer.status < 500, where
    if answer.status >= 400 and not sent.startswith("HEAD "):  # HEAD: the head only
        from_engine = "x-kvroute-backend" in answer.headers
        data = answer.json()
        if from_engine:
            error = data["error"]
            assert isinstance(error["message"], str) and isinstance(error["type"], str), where
        else:
            validator("#/components/schemas/Error").validate(data)
    assert answer.keep_alive, where
    health = client.send("GET", "/health")
    assert health.status == 200, f"after {where}: /health {health.status}"


@pytest.fixture(scope="module")
def fake_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    loop = LoopThread()
    fake = FakeUpstream()
    loop.run(fake.start())
    path = tmp_path_factory.mktemp("fuzz") / "gw.yaml"
    path.write_text(
        keyed_config(fake.url).replace("max_body_bytes: 2000", "max_body_bytes: 200000")
    )
    try:
        with running_gateway(loop, path.read_text(), config_path=path) as gw:
            yield gw
    finally:
        loop.run(fake.stop())
        loop.close()


@st.composite
def any_request(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    path, method = draw(st.sampled_from(operations()))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]))
    body = b""
    if path in COMPLETIONS and method == "POST":
        data = draw(_bodies(path, engine=False))
        body = json.dumps(data).encode()
    elif method in ("POST", "PUT", "PATCH") and draw(st.booleans()):
        body = json.dumps(draw(json_values)).encode()
    target = path
    query = draw(
        st.dictionaries(st.sampled_from(["format", "x", "model"]), st.text(max_size=8), max_size=2)
    )
    if query:
        target += "?" + urlencode(query)
    key = draw(st.sampled_from(sorted(KEYS)))
    return method, target, body, dict(KEYS[key])


# No shrinking: a failure is reported as drawn, so a failing run stays bounded in time
# too (shrinking these bodies took over five minutes).
BOUNDED = (Phase.explicit, Phase.reuse, Phase.generate)


@settings(
    max_examples=250,
    deadline=None,
    phases=BOUNDED,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=any_request())
def test_every_operation_fuzzed_from_the_description(
    fake_gateway: RunningGateway, request: tuple[str, str, bytes, dict[str, str]]
) -> None:
    method, target, body, headers = request
    client = RawClient(fake_gateway.port)
    try:
        answer = client.send(method, target, body, headers)
        check(answer, client, f"{method} {target} {body[:200]!r}")
    finally:
        client.close()


@pytest.mark.engine
@pytest.mark.llamacpp
def test_completion_bodies_fuzzed_against_llama_server(
    loop_thread: LoopThread, llamacpp_server: EngineRecord, tmp_path: Path
) -> None:
    config = (
        "listener: {access_log: false}\nhealth: {interval_s: 60}\n"
        f"backends: [{{name: l0, url: '{llamacpp_server.base_url}', engine: llamacpp, "
        f"model: {llamacpp_server.model_name}}}]\n"
    )
    with running_gateway(loop_thread, config) as gw:
        client = RawClient(gw.port)
        try:
            _fuzz_completions(client)
        finally:
            client.close()


def _fuzz_completions(client: RawClient) -> None:
    requests = st.sampled_from(COMPLETIONS).flatmap(
        lambda path: _bodies(path, engine=True).map(lambda body: (path, body))
    )

    @settings(
        max_examples=120,
        deadline=None,
        phases=BOUNDED,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(request=requests)
    def run(request: tuple[str, dict[str, Any]]) -> None:
        path, body = request
        raw = json.dumps(body).encode()
        check(client.send("POST", path, raw), client, f"POST {path} {raw[:300]!r}")

    run()


@settings(max_examples=50, deadline=None, phases=BOUNDED)
@given(data=st.data(), path=st.sampled_from(COMPLETIONS))
def test_generated_bodies_are_valid_by_the_description(data: st.DataObject, path: str) -> None:
    """The generator's own check: what it calls valid, the description accepts (the
    engine part's bodies; the fake part also draws models the description forbids)."""
    body = data.draw(_valid(path, engine=True))
    assert validator(request_schema(path)["$ref"]).is_valid(body), body
