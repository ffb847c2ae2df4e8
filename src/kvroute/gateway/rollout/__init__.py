"""Canary and shadow: splitting a route's traffic and comparing the sides."""
