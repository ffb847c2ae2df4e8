"""The load-generating client, on :mod:`kvroute.http.client`'s connections:

send.py         one request on a pooled connection: timeouts, deadline, stale-reuse retry
stream_sink.py  one response's bytes read into a RequestRecord (first token, chunks, usage)
dispatch.py     open-loop sends at their intended times, from timer callbacks
execute.py      one shard: open and closed loops, dependencies, Ctrl-C
shards.py       shards split by dependency chain and run in forked processes
"""
