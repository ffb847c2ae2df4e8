"""The data-plane HTTP layer shared by the gateway and bench: client, SSE framing."""
