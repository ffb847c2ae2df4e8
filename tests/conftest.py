"""Shared test setup. Keep this file small: put fixtures in plugin modules."""

pytest_plugins = ["engine_fixtures"]
