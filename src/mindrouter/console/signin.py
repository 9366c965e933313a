"""Local sign-in with a password, and sign-out.

Failed attempts are counted per client address and per user name (the same token buckets that
slow down API key guessing); when either runs dry, the form answers 429 without checking the
password. A successful sign-in starts a new session (see `guard.begin_session`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mindrouter.console.guard import (
    PREFIX,
    begin_session,
    checked_form,
    console_of,
    current_account,
    safe_next,
)
from mindrouter.console.render import page
from mindrouter.http.common import client_address

FAILED = "wrong user name or password"


def _source(request: Request) -> str:
    client = request.client
    address = client_address(
        client.host if client else None,
        request.headers.get("x-forwarded-for"),
        request.app.state.trusted,
    )
    return address or "unknown"


def sign_in_page(
    request: Request, *, error: str | None = None, username: str = "", status: int = 200
) -> Response:
    console = console_of(request)
    target = safe_next(request.query_params.get("next") or request.session.get("next"))
    return page(
        request,
        "sign_in.html",
        None,
        status_code=status,
        error=error,
        next=target,
        username=username,
        oidc=console.oidc is not None,
    )


async def show(request: Request) -> Response:
    if await current_account(request) is not None:
        return RedirectResponse(safe_next(request.query_params.get("next")), status_code=303)
    return sign_in_page(request)


async def submit(request: Request) -> Response:
    console = console_of(request)
    form = await checked_form(request)
    username = str(form.get("username", "")).strip()[:100]
    password = str(form.get("password", ""))
    target = safe_next(str(form.get("next", "")))
    names = [f"console-ip:{_source(request)}", f"console-user:{username}"]
    failures = console.sign_in_failures
    wait = failures.retry_after(names)
    if wait is not None:
        return sign_in_page(
            request,
            error=f"too many failed sign-ins; try again in {int(wait) + 1} seconds",
            username=username,
            status=429,
        )
    account = await console.stores.accounts.by_name(username) if username else None
    ok = await console.passwords.verify(account.password_hash if account else None, password)
    if account is None or not ok or not account.active:
        failures.failed(names)
        return sign_in_page(request, error=FAILED, username=username, status=401)
    begin_session(request, account)
    return RedirectResponse(target, status_code=303)


async def sign_out(request: Request) -> Response:
    await checked_form(request)
    request.session.clear()
    return RedirectResponse(f"{PREFIX}/sign-in", status_code=303)


def sign_in_routes() -> list[Route]:
    return [
        Route("/sign-in", show, methods=["GET"]),
        Route("/sign-in", submit, methods=["POST"]),
        Route("/sign-out", sign_out, methods=["POST"]),
    ]
