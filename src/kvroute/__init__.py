"""kvroute: measure prefix reuse in LLM traffic, model each engine's prefix cache, route between engines."""

__version__ = "0.1.0"
