"""The report of ``kvroute analyze``: terminal summary, HTML page, and their sections
(reuse breakdown, cache breakers, prompt drift)."""
