"""Prefix-overlap and traffic-shape analysis of traces; pure, returns plain dataclasses."""
