"""The report of ``kvroute simulate``: terminal summary, HTML page, and the
``--validate`` comparison with a real engine."""
