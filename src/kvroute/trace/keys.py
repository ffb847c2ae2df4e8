"""The secret key that keyed trace hashes are made with, and the file it lives in.

One mechanism for ``kvroute export`` and the gateway's capture: a key file created on
first use (32 random bytes, hex, readable by its owner only), by default
``$XDG_CONFIG_HOME/kvroute/trace.key``. Traces made with one key compare with each
other (their headers name the key's id, :func:`kvroute.trace.hashing.key_id`); without
the key nobody can hash a guessed prompt to test it against a file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kvroute.errors import InputError
from kvroute.trace.hashing import KEY_BYTES


def default_key_file(env: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/kvroute/trace.key`` (``~/.config`` when unset)."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kvroute" / "trace.key"


def load_or_create_key(path: Path) -> tuple[bytes, bool]:
    """The key in ``path``, creating the file with a fresh random key when it does not
    exist (mode 0600). Returns the key and whether it was created. Raises
    :class:`InputError` naming the file when its content is not a key."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(KEY_BYTES)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.hex() + "\n")
        return key, True
    except OSError as exc:
        raise InputError(f"cannot read the key file: {exc.strerror}", path=str(path)) from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise InputError(
            "not a trace key (expected at least 32 hex digits)",
            path=str(path),
            hint="delete it to have a new key made, or point --key-file at the right one",
        )
    return key, False
