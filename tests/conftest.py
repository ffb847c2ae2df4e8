"""Shared test setup. Keep this file small: put fixtures in plugin modules."""

from kvroute import _accel

_accel.enable()  # as the kvroute command does, before any kvroute module is imported

pytest_plugins = ["engine_fixtures"]
