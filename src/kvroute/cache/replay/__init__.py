"""Replaying a trace through one prefix-cache model, in time.

``loop`` runs the events (arrivals, completions, scheduling passes); ``seq`` turns trace
requests into the :class:`~kvroute.cache.base.CacheSeq` pairs the models see; ``timing``
says when requests arrive and how long they run.
"""
