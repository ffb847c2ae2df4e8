"""The engines' prefix-cache models, one module per engine, and the parts each owns.

``vllm`` (block pool, free queue), ``sglang`` (on ``radix``, its radix tree and eviction
policies), ``llamacpp`` (slots, on ``prompt_cache``, its ``--cache-ram`` host cache, and
``chunk_reuse``, its ``--cache-reuse`` chunk shifting). Each model implements
:class:`~kvroute.cache.base.PrefixCache` and checks its own invariants; ``shared`` holds
the helpers they share that must stay interpreted in the compiled build.
"""
