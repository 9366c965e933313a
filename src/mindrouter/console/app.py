"""The console as a Starlette app of its own, mounted at /console.

Its session cookie, body bound and security headers come from `ConsoleLayer`, which wraps this
app only: the inference routes are matched before the mount and never pass through it.
"""

from __future__ import annotations

import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from mindrouter.console.admin_pages import admin_routes
from mindrouter.console.deps import Console
from mindrouter.console.guard import current_account
from mindrouter.console.oidc import oidc_client, oidc_routes
from mindrouter.console.render import HERE, page
from mindrouter.console.session import ConsoleLayer
from mindrouter.console.signin import sign_in_routes
from mindrouter.console.status import status_routes
from mindrouter.console.user_pages import user_routes
from mindrouter.errors import MindRouterError
from mindrouter.http.common import TrustedProxies
from mindrouter.http.errors import STATUS_BY_KIND
from mindrouter.http.routing_admin_routes import SetDraining
from mindrouter.identity.attempts import FailedAttempts
from mindrouter.identity.authenticate import Authenticator
from mindrouter.identity.passwords import Passwords
from mindrouter.observability.logging import log
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings
from mindrouter.stores.sql.bundle import SqlStores

TITLES = {400: "Not accepted", 403: "Not allowed", 404: "Not found", 413: "Too large"}


async def _error_page(request: Request, status: int, message: str) -> Response:
    if "session" not in request.scope:
        request.scope["session"] = {}
    account = await current_account(request) if status != 500 else None
    title = TITLES.get(status, "Something went wrong")
    return page(request, "error.html", account, status, title=title, message=message)


async def _on_gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MindRouterError)
    return await _error_page(request, STATUS_BY_KIND.get(exc.kind, 500), exc.message)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "There is no such page." if exc.status_code == 404 else str(exc.detail)
    return await _error_page(request, exc.status_code, message)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("console page failed", path=request.url.path, exc_info=exc)
    return await _error_page(request, 500, "The page failed; the error has been logged.")


def build_console(
    settings: Settings,
    *,
    stores: SqlStores,
    gateway: Gateway,
    authenticator: Authenticator,
    trusted: TrustedProxies,
    set_draining: SetDraining,
    passwords: Passwords | None = None,
) -> Starlette:
    console = Console(
        settings=settings,
        stores=stores,
        gateway=gateway,
        authenticator=authenticator,
        set_draining=set_draining,
        passwords=passwords or Passwords(),
        sign_in_failures=FailedAttempts(
            settings.console.sign_in_failures_per_minute, time.monotonic
        ),
        oidc=oidc_client(settings.console.oidc),
    )
    app = Starlette(
        routes=[
            *sign_in_routes(),
            *oidc_routes(),
            *user_routes(),
            *admin_routes(),
            *status_routes(),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[
            Middleware(
                ConsoleLayer,
                secret_key=settings.secret_key,
                max_age_s=settings.console.session_hours * 3600,
                trusted=trusted,
            )
        ],
        exception_handlers={
            MindRouterError: _on_gateway_error,
            HTTPException: _on_http_error,
            Exception: _on_unexpected,
        },
    )
    app.state.console = console
    app.state.trusted = trusted
    return app
