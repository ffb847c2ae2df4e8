"""The HTML report of ``kvroute advise``."""
