"""Choosing a backend: classify, routes, the routing plan and the policies."""
