"""The bytes of an HTTP/1.1 response head: status line, headers, and what the server
adds after them (framing, connection)."""

from __future__ import annotations

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Payload Too Large",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}


def response_head(status: int, headers: list[tuple[str, str]], extra: bytes) -> bytes:
    """Status line and ``headers`` (latin-1), then ``extra`` as given: the framing
    headers and the blank line that ends the head."""
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))]
    for name, value in headers:
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(extra)
    return b"".join(lines)
