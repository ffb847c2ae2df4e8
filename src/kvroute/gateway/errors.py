"""Gateway errors and their one mapping to OpenAI-style error JSON.

``{"error": {"message", "type", "param", "code"}}`` with the status the error names;
``kind`` is the ``errors_total`` label. Bad input is always a 4xx, never a 500.
"""

from __future__ import annotations

from kvroute.errors import KvrouteError
from kvroute.http.messages import Response, error_payload


class GatewayError(KvrouteError):
    """An error the gateway answers a client with."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str,
        kind: str,
        code: str | None = None,
        param: str | None = None,
        retry_after_s: float | None = None,
        allow: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.kind = kind
        self.code = code
        self.param = param
        self.retry_after_s = retry_after_s
        self.allow = allow
        """The methods a 405's ``Allow`` header lists."""


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(
        message,
        status=400,
        error_type="invalid_request_error",
        kind="bad_request",
        param=param,
        code=code,
    )


def error_response(exc: GatewayError) -> Response:
    """The response for ``exc``: its status, OpenAI error JSON, ``Retry-After`` if set."""
    headers = [("content-type", "application/json")]
    if exc.retry_after_s is not None:
        headers.append(("retry-after", str(max(1, round(exc.retry_after_s + 0.499)))))
    if exc.allow is not None:
        headers.append(("allow", exc.allow))
    return Response(
        exc.status, headers, error_payload(exc.message, exc.error_type, exc.param, exc.code)
    )
