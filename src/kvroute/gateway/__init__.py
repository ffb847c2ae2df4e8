"""The gateway: one OpenAI-compatible endpoint over llama.cpp, vLLM and SGLang backends.

See docs/gateway.md. The pure parts (config, classify, routing, policies, breaker,
limits' buckets, SSE relay) take plain data; sockets live in server.py and upstream/.
"""
