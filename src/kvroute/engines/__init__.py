"""Real inference engines: adapters that read them (base.py, one module per engine) and
local.py, which starts and stops them on this machine. See docs/engines.md."""
