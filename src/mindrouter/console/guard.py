"""Who is signed in, and what they may do: every console page and action passes through here.

- `signed_in` pages need a session whose user still exists, is active and has a console
  account; without one the browser is sent to the sign-in page (and back afterwards).
- `admin_only` pages need a console administrator; anyone else gets 404, so the admin pages do
  not even show that they exist.
- Every POST carries the session's CSRF token in a hidden `csrf` field. The token is random per
  session and lives inside the signed session cookie, so another site can neither read it nor
  plant one of its own (a planted cookie would need the gateway's signature); the check is a
  constant-time comparison. SameSite=Lax on the cookie is a second line, not the only one.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from mindrouter.console.deps import Console
from mindrouter.errors import Forbidden, NotFound
from mindrouter.stores.sql.accounts import ConsoleAccount

Handler = Callable[[Request, ConsoleAccount], Awaitable[Response]]
PREFIX = "/console"


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def checked_form(request: Request) -> FormData:
    """The posted form, once its CSRF token matched the session's; 403 otherwise."""
    form = await request.form()
    sent = form.get("csrf")
    expected = request.session.get("csrf")
    if (
        not isinstance(sent, str)
        or not isinstance(expected, str)
        or not hmac.compare_digest(sent.encode(), expected.encode())
    ):
        raise Forbidden("the form's security token is missing or stale; reload the page")
    return form


def begin_session(request: Request, account: ConsoleAccount) -> None:
    """A fresh session for `account`: the old one's contents (and CSRF token) are dropped, so a
    session fixed before sign-in is worth nothing after it."""
    request.session.clear()
    request.session.update(
        {"uid": account.user_id, "since": time.time(), "csrf": secrets.token_urlsafe(32)}
    )


async def current_account(request: Request) -> ConsoleAccount | None:
    uid = request.session.get("uid")
    since = request.session.get("since")
    if not isinstance(uid, int) or not isinstance(since, int | float):
        return None
    console = console_of(request)
    if time.time() - since > console.settings.console.session_hours * 3600:
        request.session.clear()
        return None
    account = await console.stores.accounts.by_id(uid)
    if account is None or not account.active or not account.has_sign_in:
        request.session.clear()
        return None
    return account


def to_sign_in(request: Request) -> Response:
    target = request.url.path
    if request.url.query:
        target += "?" + request.url.query
    return RedirectResponse(f"{PREFIX}/sign-in?next={quote(target, safe='')}", status_code=303)


def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def page(request: Request) -> Response:
        account = await current_account(request)
        if account is None:
            return to_sign_in(request)
        return await handler(request, account)

    return page


def admin_only(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def page(request: Request) -> Response:
        account = await current_account(request)
        if account is None:
            return to_sign_in(request)
        if not account.is_admin:
            raise NotFound("no such page")
        return await handler(request, account)

    return page


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: only a path of the console itself (never another site)."""
    if target and target.startswith(PREFIX + "/") and "\\" not in target and "//" not in target:
        return target
    return PREFIX + "/"
