"""The gateway: one OpenAI-compatible endpoint over llama.cpp, vLLM and SGLang backends.

See docs/gateway.md. The pure parts (config, classify, routing, policies, breaker,
limits' buckets, SSE relay) take plain data; sockets live in server.py and upstream/.
"""

from kvroute.gateway.native import search_path

__path__ = search_path(__path__)  # the compiled build first, when it is current (native.py)
