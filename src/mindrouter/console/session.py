"""The console's own ASGI layer: the signed session cookie, a small body bound and the security
headers. It wraps the console only, so the inference routes never pay for any of it.

The session lives in the cookie itself, signed with the gateway's `secret_key` (itsdangerous,
with a timestamp checked against the session lifetime): no server-side store is needed, and a
cookie that was tampered with, or is older than `session_hours`, reads as no session. The cookie
is HttpOnly (no script can read it), SameSite=Lax (not sent with cross-site form posts),
limited to /console, and Secure when the request came over HTTPS (directly, or through a
trusted proxy that says so in X-Forwarded-Proto).
"""

from __future__ import annotations

import json
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.errors import PayloadTooLarge
from mindrouter.http.common import TrustedProxies

COOKIE = "mr_console"
PATH = "/console"
# Forms are small; a bigger body is refused before it is parsed.
MAX_BODY_BYTES = 256 * 1024
# Scripts only from the console's own static files, no inline script or style, no framing,
# forms only to the console itself.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
]


def serializer(secret_key: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key, salt="mindrouter.console.session")


class ConsoleLayer:
    def __init__(
        self, app: ASGIApp, *, secret_key: str, max_age_s: float, trusted: TrustedProxies
    ) -> None:
        self.app = app
        self._signer = serializer(secret_key)
        self._max_age = int(max_age_s)
        self._trusted = trusted

    def _load(self, headers: Headers) -> dict[str, Any]:
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and value:
                try:
                    data = self._signer.loads(value, max_age=self._max_age)
                except BadSignature:
                    return {}
                return data if isinstance(data, dict) else {}
        return {}

    def _secure(self, scope: Scope, headers: Headers) -> bool:
        if scope.get("scheme") == "https":
            return True
        client = scope.get("client")
        return (
            client is not None
            and client[0] in self._trusted
            and headers.get("x-forwarded-proto", "").split(",")[0].strip() == "https"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            response = PlainTextResponse("form too large", status_code=413)
            await response(scope, receive, send)
            return
        session = self._load(headers)
        had_cookie = bool(session)
        before = json.dumps(session, sort_keys=True)
        scope["session"] = session
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_BODY_BYTES:
                raise PayloadTooLarge(f"the form is larger than {MAX_BODY_BYTES} bytes")
            return message

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for header, text in SECURITY_HEADERS:
                    if header not in out:
                        out.append(header, text)
                current = scope["session"]
                flags = f"Path={PATH}; HttpOnly; SameSite=Lax"
                if self._secure(scope, headers):
                    flags += "; Secure"
                if current and json.dumps(current, sort_keys=True) != before:
                    value = self._signer.dumps(current)
                    out.append(
                        "set-cookie", f"{COOKIE}={value}; Max-Age={int(self._max_age)}; {flags}"
                    )
                elif not current and had_cookie:
                    out.append("set-cookie", f"{COOKIE}=; Max-Age=0; {flags}")
            await send(message)

        await self.app(scope, bounded, send_with_cookie)
