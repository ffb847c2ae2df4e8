"""A routed prompt's token ids, as the engine's chat template and tokenizer make them."""

from kvroute.gateway.native import search_path

__path__ = search_path(__path__, "prompts")  # the compiled build first, when current (native.py)
