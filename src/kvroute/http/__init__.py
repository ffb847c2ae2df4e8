"""The data-plane HTTP layer shared by the gateway and bench: the HTTP/1.1 server
(server.py, messages.py), the pooled client (client/), SSE framing (sse.py)."""
