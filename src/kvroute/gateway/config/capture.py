"""The ``capture:`` section."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """The ``capture:`` section. Capture is on when ``directory`` is set."""

    directory: str = ""
    tokenizer: str = ""
    """GGUF file or HF tokenizer directory of the served model; empty: the default model."""
    block_size_tokens: int = 16
    rotate_bytes: int = 256 * 1024 * 1024
    rotate_s: float = 3600.0
    include_text: bool = False
    max_queue: int = 100_000
    flush_interval_s: float = 0.2
    """How often the worker writes what is queued (and flushes the file): records reach
    the file within about this long. Much shorter costs CPU (bench/RESULTS.md)."""
    file_prefix: str = "capture"
    key_file: str = ""
    """The secret key the written hashes are keyed with (``kvroute export``'s key file,
    created on first use); empty: ``$XDG_CONFIG_HOME/kvroute/trace.key``, the one
    ``kvroute export`` uses by default."""

    @property
    def enabled(self) -> bool:
        return bool(self.directory)
