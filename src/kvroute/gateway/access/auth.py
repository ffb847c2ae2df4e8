"""API keys: clients send ``Authorization: Bearer <key>``; the config stores only the
key's SHA-256. Admin endpoints take a separate admin key.

SHA-256 without salt is right for keys (high-entropy random strings, not passwords);
comparison is by dictionary lookup of the digest, which leaks nothing useful about
the key. With no keys configured the gateway is open (it binds 127.0.0.1 by default).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from kvroute.gateway.config.gateway import KeyConfig
from kvroute.gateway.errors import GatewayError


def hash_key(key: str) -> str:
    """The SHA-256 hex digest the config stores for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return headers.get("x-api-key") or None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class KeyStore:
    """The configured keys by digest. ``open`` when there are none."""

    def __init__(self, keys: Sequence[KeyConfig]) -> None:
        self._by_digest = {k.sha256: k for k in keys}

    @property
    def open(self) -> bool:
        return not self._by_digest

    def authenticate(self, headers: Mapping[str, str]) -> KeyConfig | None:
        """The key the request presents, None on an open gateway; 401 otherwise."""
        if self.open:
            return None
        token = bearer_token(headers)
        if token is None:
            raise unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        key = self._by_digest.get(hash_key(token))
        if key is None:
            raise unauthorized("invalid API key")
        return key


def check_admin(headers: Mapping[str, str], admin_sha256: str | None) -> None:
    """Raise 404 when no admin key is configured (the endpoints do not exist), 401 for
    a missing or wrong one."""
    if admin_sha256 is None:
        raise GatewayError(
            "admin endpoints are disabled (no admin.key_sha256 in the config)",
            status=404,
            error_type="invalid_request_error",
            kind="not_found",
            code="not_found",
        )
    token = bearer_token(headers)
    if token is None or hash_key(token) != admin_sha256:
        raise unauthorized("admin endpoints need the admin key")


def check_model(key: KeyConfig | None, model: str) -> None:
    if key is not None and not key.allows(model):
        raise GatewayError(
            f"key '{key.name}' may not use model '{model}'",
            status=403,
            error_type="permission_error",
            kind="forbidden",
            code="model_not_allowed",
            param="model",
        )


def unauthorized(message: str) -> GatewayError:
    return GatewayError(
        message,
        status=401,
        error_type="authentication_error",
        kind="unauthorized",
        code="invalid_api_key",
    )
