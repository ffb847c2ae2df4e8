from __future__ import annotations

import pytest

from kvroute.errors import InputError, InputErrors
from kvroute.gateway.config.gateway import ANY_POOL, parse_config
from kvroute.gateway.types import WorkloadClass

H = "a" * 64
GOOD = f"""
listener: {{host: 0.0.0.0, port: 9000}}
backends:
  - name: fast
    url: http://127.0.0.1:8080
    engine: llamacpp
    model: small
    pool: chat
    weight: 2
    timeouts: {{connect_s: 1, first_token_s: 5, total_s: 60}}
  - {{name: big, url: 'http://10.0.0.2:8000/', engine: vllm, models: [small, large], pool: prefix}}
routes:
  - {{name: agents, match: {{class: [agent, long_prefix]}}, pool: prefix, policy: session_affinity,
     policy_options: {{load_factor: 1.5}}}}
  - {{match: {{model: "small*"}}, pool: chat}}
keys:
  - {{name: alice, sha256: {H}, models: [small], requests_per_minute: 60, tokens_per_minute: 10000}}
admin: {{key_sha256: {H}}}
limits: {{max_in_flight: 8, max_queue: 16, queue_timeout_s: 2}}
breaker: {{failure_threshold: 2, open_s: 5}}
"""


def test_a_full_config() -> None:
    c = parse_config(GOOD, "gw.yaml")
    assert c.listener.host == "0.0.0.0" and c.listener.port == 9000
    assert [b.name for b in c.backends] == ["fast", "big"]
    assert c.backends[0].models == ("small",) and c.backends[0].weight == 2.0
    assert c.backends[0].timeouts.first_token_s == 5.0
    assert c.backends[1].url == "http://10.0.0.2:8000"
    assert c.routes[0].classes == (WorkloadClass.AGENT, WorkloadClass.LONG_PREFIX)
    assert c.routes[0].policy_options == {"load_factor": 1.5}
    assert c.routes[1].name == "route-1" and c.routes[1].matches("small-v2", WorkloadClass.CHAT)
    assert c.keys[0].allows("small") and not c.keys[0].allows("large")
    assert c.limits.max_in_flight == 8 and c.breaker.failure_threshold == 2


def test_minimal_config_routes_everything() -> None:
    c = parse_config("backends: [{name: a, url: 'http://h:1', engine: sglang}]", "x.yaml")
    assert c.routes[0].pool == ANY_POOL and c.listener.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: tgi}\n",
            "x.yaml:2, field 'backends[0].engine': unknown engine 'tgi' (valid: llamacpp, vllm, sglang)",
        ),
        (
            "backends:\n  - name: a\n    url: ftp://h\n    engine: vllm\n",
            "x.yaml:3, field 'backends[0].url'",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\nroutes:\n  - pool: nowhere\n",
            "x.yaml:4, field 'routes[0].pool': no backend is in pool 'nowhere'",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\nroutes:\n  - {pool: default, policy: fastest}\n",
            "unknown policy 'fastest' (valid: cache_aware, least_outstanding, power_of_two, round_robin, session_affinity, weighted_random)",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\nroutes:\n  - {pool: default, match: {class: [poetry]}}\n",
            "unknown workload class 'poetry'",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\nlimits:\n  max_inflight: 3\n",
            "x.yaml:4, field 'limits.max_inflight': unknown key",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\nkeys:\n  - {name: k, sha256: secret}\n",
            "must be 64 hex digits",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm}\n  - {name: a, url: 'http://h:2', engine: vllm}\n",
            "two backends are named 'a'",
        ),
        ("backends: []\nbackends: []\n", "x.yaml:2: duplicate key 'backends'"),
        ("backends: [\n", "x.yaml:2: invalid YAML"),
        ("listener: {port: 8000}\n", "'backends' is required"),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm, weight: -1}\n",
            "field 'backends[0].weight': must be > 0",
        ),
        (
            "backends:\n  - {name: a, url: 'http://h:1', engine: vllm, api_key_env: NOPE_KEY}\n",
            "NOPE_KEY is not set",
        ),
    ],
)
def test_errors_point_at_the_line(text: str, where: str) -> None:
    with pytest.raises(InputError) as err:
        parse_config(text, "x.yaml", env={})
    assert where in str(err.value)


def test_upstream_key_from_environment() -> None:
    text = "backends:\n  - {name: a, url: 'http://h:1', engine: vllm, api_key_env: K}\n"
    c = parse_config(text, "x.yaml", env={"K": "sk-up"})
    assert c.backends[0].api_key == "sk-up" and "sk-up" not in repr(c)


def test_every_error_is_reported_at_once_with_its_line_and_field() -> None:
    text = """\
listener:
  port: 99999
  colour: blue
backends:
  - name: a
    url: ftp://x
    engine: vlm
  - {name: b, url: 'http://127.0.0.1:8081', engine: llamacpp, weight: -1, pool: chat}
routes:
  - {pool: chat, policy: magic}
  - {pool: nowhere}
limits:
  max_queue: many
"""
    with pytest.raises(InputErrors) as info:
        parse_config(text, "gw.yaml")
    found = [(e.line, e.field) for e in info.value.errors]
    assert found == [
        (2, "listener.port"),
        (3, "listener.colour"),
        (6, "backends[0].url"),
        (7, "backends[0].engine"),
        (8, "backends[1].weight"),
        (10, "routes[0].policy"),
        (11, "routes[1].pool"),
        (13, "limits.max_queue"),
    ]
    assert all(e.path == "gw.yaml" for e in info.value.errors)


def test_a_route_to_the_pool_of_a_backend_with_an_error_is_not_refused_too() -> None:
    text = """\
backends:
  - {name: a, url: 'http://127.0.0.1:1', engine: vlm, pool: chat}
routes:
  - {pool: chat}
"""
    with pytest.raises(InputError) as info:
        parse_config(text, "gw.yaml")
    assert not isinstance(info.value, InputErrors)
    assert info.value.field == "backends[0].engine"
