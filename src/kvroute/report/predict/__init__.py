"""The HTML report of ``kvroute predict``."""
