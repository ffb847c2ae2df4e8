"""Bad input the gateway must answer itself with a 400, never a 500 of its own or the
engine's: user-controlled depth (the classifier recursed into ``extra_body``: 1,000
levels were a RecursionError, a 500). The tool and content shapes engines answer with
a 500 are in test_app.py's ``test_bad_input_is_400_with_param``."""

from __future__ import annotations

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from gateway.proxy.test_forward import config

DEEP = b'{"extra_body": ' * 1000 + b"{}" + b"}" * 1000


@pytest.mark.parametrize("stream", [False, True], ids=["as is", "re-encoded"])
def test_deep_nesting_is_never_a_500(
    loop_thread: LoopThread, fake: FakeUpstream, stream: bool
) -> None:
    """Forwarded as is, it reaches the engine; when the gateway must re-encode the body
    (here to add ``include_usage``), deeper than orjson writes (255) is a 400."""
    options = b'"stream": true, "stream_options": {"include_usage": false}, ' if stream else b""
    body = (
        b'{"model": "m", '
        + options
        + b'"messages": [{"role": "user"}], "extra_body": '
        + DEEP
        + b"}"
    )
    with running_gateway(loop_thread, config(fake.url)) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", content=body)
    assert r.status_code == (400 if stream else 200), r.text
    assert len(fake.received) == (0 if stream else 1)
