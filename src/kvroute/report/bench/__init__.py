"""The reports of ``kvroute bench``: terminal summary, HTML page, its charts, and the
rows both show."""
