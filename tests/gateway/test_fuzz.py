"""Fuzzing the OpenAI surface: whatever the body, the gateway answers 2xx/4xx with
OpenAI-shaped errors, never a 5xx of its own (hypothesis; schemathesis not used)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, RunningGateway, running_gateway

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", 3])},
        optional={"content": json_values, "tool_calls": json_values},
    ),
    max_size=6,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "", "other"]) | json_values,
        "messages": messages | json_values,
        "prompt": st.text(max_size=20) | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values})
        | json_values,
        "response_format": st.fixed_dictionaries(
            {"type": st.sampled_from(["json_object", "json_schema", "text"])}
        )
        | json_values,
        "tools": json_values,
        "user": json_values,
        "max_tokens": json_values,
    },
)
raw_bodies = st.binary(max_size=64) | st.text(max_size=64).map(str.encode)


@pytest.fixture(scope="module")
def module_gateway() -> Iterator[RunningGateway]:
    loop = LoopThread()
    fake = FakeUpstream()
    loop.run(fake.start())
    config = (
        "listener: {access_log: false, max_body_bytes: 100000}\n"
        f"backends: [{{name: b, url: '{fake.url}', engine: llamacpp, models: [m]}}]\n"
        "health: {interval_s: 60}\n"
        "routes: [{match: {class: structured}, pool: default, policy: session_affinity}, {pool: default, policy: power_of_two}]\n"
    )
    with running_gateway(loop, config) as gw:
        yield gw
    loop.run(fake.stop())
    loop.close()


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
def test_json_bodies_never_5xx(
    module_gateway: RunningGateway, body: dict[str, object], path: str
) -> None:
    check(httpx.post(f"{module_gateway.url}{path}", content=json.dumps(body), timeout=10))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=raw_bodies,
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=st.sampled_from(
        ["/v1/chat/completions", "/v1/completions", "/v1/models", "/x", "/admin/reload", "/v1/"]
    ),
)
def test_raw_bodies_and_methods_never_5xx(
    module_gateway: RunningGateway, raw: bytes, method: str, path: str
) -> None:
    check(httpx.request(method, f"{module_gateway.url}{path}", content=raw, timeout=10))
