"""The data-plane HTTP/1.1 client: pooled keep-alive connections to one backend each,
shared by the gateway's proxy and bench's load generator.

    base.py        the vocabulary: Origin, Transport, Exchange, ResponseReceiver,
                   UpstreamRequest, UpstreamFailure
    pool.py        PooledTransport, the real Transport: idle connections (LIFO), a bound on
                   connections in use, spares opened ahead, connect, send
    connection.py  the asyncio protocol of one connection, httptools' response parser,
                   each received piece stamped with the transport's clock
    exchange.py    one awaited request in flight: head, batched body, back-pressure, timeouts

A response is taken either awaited (:meth:`PooledTransport.send` -> :class:`Exchange`)
or pushed to a :class:`ResponseReceiver` from the socket's callback
(:meth:`PooledTransport.start_idle`, :meth:`PooledTransport.start`). Import from here;
the names below are the package's public surface.
"""

from kvroute.http.client.base import (
    Clock,
    Exchange,
    FailureKind,
    Origin,
    ResponseReceiver,
    Transport,
    UpstreamFailure,
    UpstreamRequest,
)
from kvroute.http.client.connection import PooledConnection
from kvroute.http.client.pool import PooledTransport

__all__ = [
    "Clock",
    "Exchange",
    "FailureKind",
    "Origin",
    "PooledConnection",
    "PooledTransport",
    "ResponseReceiver",
    "Transport",
    "UpstreamFailure",
    "UpstreamRequest",
]
