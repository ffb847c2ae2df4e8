from __future__ import annotations

import json

import orjson
import pytest

from kvroute.gateway.errors import GatewayError
from kvroute.gateway.proxy.prepare import CompletionPath, parse_body, upstream_body

RAW = b'{ "model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 5, "x_custom": [1] }'


def test_untouched_when_nothing_to_change() -> None:
    body = parse_body(RAW, CompletionPath.CHAT)
    assert upstream_body(body, inject_usage=False, model=None) is RAW
    assert upstream_body(body, inject_usage=False, model="m") is RAW


def test_usage_is_spliced_in_keeping_every_other_byte() -> None:
    out = upstream_body(parse_body(RAW, CompletionPath.CHAT), inject_usage=True, model=None)
    assert out.replace(b'"stream_options":{"include_usage":true},', b"") == RAW
    assert json.loads(out)["stream_options"] == {"include_usage": True}


def test_existing_stream_options_and_alias_are_reencoded() -> None:
    raw = b'{"model": "alias", "prompt": "x", "stream": true, "stream_options": {"include_usage": false, "other": 1}}'
    out = orjson.loads(
        upstream_body(parse_body(raw, CompletionPath.COMPLETIONS), inject_usage=True, model="real")
    )
    assert out == {
        "model": "real",
        "prompt": "x",
        "stream": True,
        "stream_options": {"include_usage": True, "other": 1},
    }


def test_reads_what_routing_needs() -> None:
    body = parse_body(RAW, CompletionPath.CHAT)
    assert (body.model, body.stream, body.wants_usage) == ("m", True, False)
    raw = b'{"model": "m", "prompt": [1, 2], "stream": null}'
    assert parse_body(raw, CompletionPath.COMPLETIONS).stream is False


@pytest.mark.parametrize("raw", [b'{"model": "m", "prompt": 3}', b'{"model": "m"}'])
def test_completions_need_a_prompt(raw: bytes) -> None:
    with pytest.raises(GatewayError) as err:
        parse_body(raw, CompletionPath.COMPLETIONS)
    assert err.value.status == 400 and err.value.param == "prompt"


def test_a_message_name_that_is_not_a_string_is_a_400_naming_it() -> None:
    # llama-server answers this body with a 500 (found by test_fuzz_openapi.py).
    raw = b'{"model": "m", "messages": [{"role": "user", "name": [[], []], "content": "hi"}]}'
    with pytest.raises(GatewayError) as err:
        parse_body(raw, CompletionPath.CHAT)
    assert err.value.status == 400 and err.value.param == "messages[0].name"
    named = b'{"model": "m", "messages": [{"role": "user", "name": "ann", "content": "hi"}]}'
    assert parse_body(named, CompletionPath.CHAT).model == "m"
