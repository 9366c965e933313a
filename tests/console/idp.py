"""A small OpenID Connect provider for the default suite, with knobs to misbehave.

It serves discovery, JWKS, an authorization endpoint that signs the user in at once (no login
form) and a token endpoint that checks the PKCE verifier and returns an ID token. The test
sets `claims` (who signs in) and `tamper` (what to get wrong: the nonce, the issuer, the expiry,
or the signing key) before each flow.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

CLIENT_ID = "mindrouter-test"
CLIENT_SECRET = "test-client-secret"


@dataclass
class Grant:
    nonce: str | None
    challenge: str | None
    redirect_uri: str


@dataclass
class Provider:
    issuer: str = ""
    claims: dict[str, Any] = field(default_factory=dict)
    tamper: str | None = None  # "nonce" | "issuer" | "expired" | "key" | "audience"
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, private=True))
    other_key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, private=True))
    grants: dict[str, Grant] = field(default_factory=dict)
    pkce_checked: int = 0

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self.discovery),
                Route("/jwks", self.jwks),
                Route("/authorize", self.authorize),
                Route("/token", self.token, methods=["POST"]),
            ]
        )

    async def discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def jwks(self, request: Request) -> Response:
        public = self.key.as_dict(private=False)
        public["kid"] = "main"
        public["use"] = "sig"
        return JSONResponse({"keys": [public]})

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        assert q["client_id"] == CLIENT_ID and q["response_type"] == "code"
        code = secrets.token_urlsafe(16)
        self.grants[code] = Grant(q.get("nonce"), q.get("code_challenge"), q["redirect_uri"])
        return RedirectResponse(
            f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}", 302
        )

    async def token(self, request: Request) -> Response:
        form = await request.form()
        grant = self.grants.pop(str(form.get("code")), None)
        if grant is None:
            return JSONResponse({"error": "invalid_grant"}, 400)
        verifier = str(form.get("code_verifier", ""))
        digest = hashlib.sha256(verifier.encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant.challenge:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, 400)
        self.pkce_checked += 1
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": grant.nonce,
            **self.claims,
        }
        key = self.key
        if self.tamper == "nonce":
            claims["nonce"] = "not-the-nonce"
        elif self.tamper == "issuer":
            claims["iss"] = "https://somebody-else.example"
        elif self.tamper == "expired":
            claims["iat"], claims["exp"] = now - 3600, now - 1800
        elif self.tamper == "audience":
            claims["aud"] = "another-client"
        elif self.tamper == "key":
            key = self.other_key
        id_token = jwt.encode({"alg": "RS256", "kid": "main"}, claims, key)
        return JSONResponse(
            {
                "access_token": secrets.token_urlsafe(16),
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": id_token,
            }
        )
