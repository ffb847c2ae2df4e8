"""Check a cache model against a real engine: serve a trace on it, then predict that same run.

The library behind ``kvroute simulate TRACE --validate URL --engine E``
(:func:`kvroute.validate.run.validate`). In order::

    setup     ask the engine what it reports (vLLM: block size and block count from
              cache_config_info; llama.cpp: slots and per-slot context from /props); the
              settings it does not report are given by the caller         settings.py
    reset     drop the engine's prefix cache so the run starts cold (llama.cpp: slots
              first put in a fresh server's order, see order_slots), or say it could not
    serve     send each request as the trace has it (chat or completions, max_tokens = its
              output length, temperature 0), at the trace's arrival times or in a closed
              loop of N clients, sends a little apart; keep each answer and its times
                                                                  serve.py, bodies.py
    counters  /metrics before and after: the server's own total of prompt and cached tokens
    predict   replay the model, built with the engine's settings, over the run as it
              happened (engine_times): when the engine started and released each request,
              and the tokens it generated (a later turn that repeats an answer hits it)
                                                                           predict.py
    compare   predicted vs measured cached tokens, per request and overall  compare.py

``run`` strings these together; ``result`` holds the records. Only ``serve``, ``settings``
and ``run`` touch the network, through the caller's ``httpx.AsyncClient`` and the engine
adapter; ``bodies``, ``predict`` and ``compare`` are pure. The cache models themselves
stay in :mod:`kvroute.cache`, which this package only reads.
"""
