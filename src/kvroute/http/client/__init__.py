"""The upstream client: pooled keep-alive HTTP/1.1 connections to one backend each.

This is the gateway's network seam, in four parts:

    base.py        the vocabulary: Transport, Exchange, UpstreamRequest, UpstreamFailure
    pool.py        PooledTransport, the real Transport: idle connections, connect, send
    connection.py  the asyncio protocol of one connection, httptools' response parser
    exchange.py    one request in flight: head, batched body, back-pressure, timeouts

Import from here; the names below are the package's public surface.
"""

from kvroute.http.client.base import (
    Exchange,
    FailureKind,
    Transport,
    UpstreamFailure,
    UpstreamRequest,
)
from kvroute.http.client.pool import PooledTransport

__all__ = [
    "Exchange",
    "FailureKind",
    "PooledTransport",
    "Transport",
    "UpstreamFailure",
    "UpstreamRequest",
]
