from __future__ import annotations

from kvroute.gateway.ops.prometheus import Counter, Histogram, render


def test_text_format() -> None:
    c = Counter("x:requests_total", "Requests.", ("code",))
    c.inc(("200",))
    c.inc(("200",))
    h = Histogram("x:latency_seconds", "Latency.", ("b",), (0.01, 0.1))
    h.observe(('a"b',), 0.005)
    h.observe(('a"b',), 0.05)
    h.observe(('a"b',), 5)
    text = render([c, h]).decode()
    assert 'x:requests_total{code="200"} 2' in text
    assert "# TYPE x:latency_seconds histogram" in text
    assert 'x:latency_seconds_bucket{b="a\\"b",le="0.01"} 1' in text
    assert 'x:latency_seconds_bucket{b="a\\"b",le="0.1"} 2' in text
    assert 'x:latency_seconds_bucket{b="a\\"b",le="+Inf"} 3' in text
    assert 'x:latency_seconds_count{b="a\\"b"} 3' in text
