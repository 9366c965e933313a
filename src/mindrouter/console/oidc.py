"""Single sign-on with OpenID Connect, through Authlib's Starlette client.

Authlib does the protocol: it reads the provider's discovery document, sends the user to the
authorization endpoint with `state`, a `nonce` and a PKCE challenge (S256), keeps them in the
session, and on the way back checks the state, trades the code (with the PKCE verifier and the
client secret) for tokens and validates the ID token: signature against the provider's JWKS,
issuer, audience, expiry and nonce. Any failure is a refused sign-in.

What the console adds: the user is found by the token's subject (`issuer|sub`, which the
provider never reassigns), or created on first sign-in with the name from `username_claim`, in
the first group that `oidc.groups` maps one of the `groups_claim` values to (else
`default_group`). Console administrators are the members of `admin_groups`, checked at every
sign-in. A name already used by an account that signs in another way is refused rather than
taken over.
"""

from __future__ import annotations

from typing import Any

import httpx
from authlib.integrations.starlette_client import OAuth, OAuthError
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mindrouter.console.guard import PREFIX, begin_session, console_of, safe_next
from mindrouter.console.signin import sign_in_page
from mindrouter.errors import NotFound
from mindrouter.observability.logging import log
from mindrouter.settings_console import OidcSettings
from mindrouter.stores.sql.accounts import ConsoleAccount

REFUSED = "single sign-on failed; try again, or ask an administrator"


def oidc_client(settings: OidcSettings | None) -> Any:
    if settings is None:
        return None
    oauth = OAuth()
    oauth.register(
        "provider",
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        server_metadata_url=settings.discovery_url,
        client_kwargs={
            "scope": " ".join(settings.scopes),
            "code_challenge_method": "S256",
            "token_endpoint_auth_method": (
                "client_secret_basic" if settings.client_secret else "none"
            ),
        },
    )
    return oauth.create_client("provider")


def callback_url(request: Request) -> str:
    public = console_of(request).settings.console.public_url
    if public:
        return f"{public}{PREFIX}/oidc/callback"
    return str(request.url_for("oidc_callback"))


async def start(request: Request) -> Response:
    client = console_of(request).oidc
    if client is None:
        raise NotFound("single sign-on is not configured")
    request.session["next"] = safe_next(request.query_params.get("next"))
    try:
        response: Response = await client.authorize_redirect(request, callback_url(request))
    except (OAuthError, httpx.HTTPError, OSError, ValueError) as exc:
        log.warning("OIDC provider unreachable", error=str(exc))
        return sign_in_page(request, error=REFUSED, status=502)
    return response


def _groups(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


async def _account_for(request: Request, claims: dict[str, Any]) -> ConsoleAccount | None:
    console = console_of(request)
    settings = console.settings.console.oidc
    assert settings is not None
    subject = f"{claims['iss']}|{claims['sub']}"
    groups = _groups(claims, settings.groups_claim)
    admin = any(g in settings.admin_groups for g in groups)
    accounts = console.stores.accounts
    account = await accounts.by_subject(subject)
    if account is not None:
        return await accounts.save(account.user_name, is_admin=admin)
    name = claims.get(settings.username_claim)
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        log.warning("OIDC sign-in without a usable user name", claim=settings.username_claim)
        return None
    name = name.strip()
    existing = await accounts.by_name(name)
    if existing is not None and existing.has_sign_in:
        # Somebody else (a local account, or another provider's subject) has this name.
        log.warning("OIDC sign-in refused: the name belongs to another account", user=name)
        return None
    if existing is None:
        group = next(
            (settings.groups[g] for g in groups if g in settings.groups), settings.default_group
        )
        await console.stores.directory.create_user(name, group)
        log.info("user created at first single sign-on", user=name, group=group)
    return await accounts.save(name, oidc_subject=subject, is_admin=admin)


async def callback(request: Request) -> Response:
    console = console_of(request)
    client = console.oidc
    if client is None:
        raise NotFound("single sign-on is not configured")
    target = safe_next(request.session.pop("next", None))
    try:
        token = await client.authorize_access_token(request)
    except (OAuthError, JoseError, httpx.HTTPError, OSError, ValueError, KeyError) as exc:
        log.warning("OIDC sign-in refused", error=f"{type(exc).__name__}: {exc}")
        return sign_in_page(request, error=REFUSED, status=400)
    claims = dict(token.get("userinfo") or {})
    if not claims.get("sub"):
        return sign_in_page(request, error=REFUSED, status=400)
    account = await _account_for(request, claims)
    if account is None or not account.active:
        return sign_in_page(request, error=REFUSED, status=403)
    begin_session(request, account)
    return RedirectResponse(target, status_code=303)


def oidc_routes() -> list[Route]:
    return [
        Route("/sign-in/oidc", start, methods=["GET"]),
        Route("/oidc/callback", callback, methods=["GET"], name="oidc_callback"),
    ]
