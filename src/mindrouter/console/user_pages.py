"""Pages for every signed-in user: their keys, usage, recent requests and the models they may
use. Everything is looked up for the session's user; an id that belongs to someone else reads
as not found."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mindrouter.bounds import MAX_EXPIRES_DAYS
from mindrouter.console.guard import PREFIX, checked_form, console_of, signed_in
from mindrouter.console.render import day_chart, flash, page
from mindrouter.console.snippets import snippets_for
from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.identity.access import access_from, may_use
from mindrouter.identity.principal import effective_limits
from mindrouter.stores.limits import Limits
from mindrouter.stores.sql.accounts import ConsoleAccount
from mindrouter.stores.sql.reports import UsageScope

MAX_KEY_NAME = 100


def gateway_url(request: Request) -> str:
    configured = console_of(request).settings.console.public_url
    return configured or str(request.base_url).removesuffix("/console/").rstrip("/")


async def home(request: Request, account: ConsoleAccount) -> Response:
    return RedirectResponse(f"{PREFIX}/usage", status_code=303)


# -- keys ----------------------------------------------------------------------------------------


async def _keys_page(
    request: Request, account: ConsoleAccount, created: str | None = None, status: int = 200
) -> Response:
    keys = await console_of(request).stores.keys.list_keys(account.user_name)
    now = datetime.now(UTC)
    return page(
        request,
        "keys.html",
        account,
        status_code=status,
        keys=sorted(keys, key=lambda k: k.id, reverse=True),
        created=created,
        now=now,
        max_days=MAX_EXPIRES_DAYS,
    )


@signed_in
async def keys(request: Request, account: ConsoleAccount) -> Response:
    return await _keys_page(request, account)


def _expiry(text: str) -> datetime | None:
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_EXPIRES_DAYS:
        raise InvalidRequest(f"expires: a number of days from 1 to {MAX_EXPIRES_DAYS}", "expires")
    return datetime.now(UTC) + timedelta(days=int(text))


@signed_in
async def create_key(request: Request, account: ConsoleAccount) -> Response:
    form = await checked_form(request)
    name = str(form.get("name", "")).strip()
    if not name or len(name) > MAX_KEY_NAME:
        raise InvalidRequest(f"name: 1 to {MAX_KEY_NAME} characters", "name")
    expires = _expiry(str(form.get("expires", "")).strip())
    created = await console_of(request).stores.keys.create_key(
        account.user_name, expires_at=expires, name=name
    )
    # Shown in this answer only: the key is never stored, and never put in the cookie.
    return await _keys_page(request, account, created=created.key, status=201)


@signed_in
async def revoke_key(request: Request, account: ConsoleAccount) -> Response:
    await checked_form(request)
    console = console_of(request)
    ref = request.path_params["key_id"]
    if not ref.isdigit():
        raise NotFound("no such API key")
    info = await console.stores.keys.get_key(ref)
    if info.user != account.user_name:
        raise NotFound("no such API key")
    await console.stores.keys.revoke_key(str(info.id))
    # This process forgets the key at once; the others at their next epoch poll.
    console.authenticator.invalidate()
    flash(request, f"Key {info.prefix} revoked.")
    return RedirectResponse(f"{PREFIX}/keys", status_code=303)


# -- usage ---------------------------------------------------------------------------------------


@signed_in
async def usage(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    user = await console.stores.directory.get_user(account.user_name)
    group = await console.stores.directory.get_group(user.group)
    eff = effective_limits(group.limits, user.overrides)
    limits = Limits(eff.token_budget, eff.rpm, eff.max_concurrent, eff.budget_period_days)
    snap = await console.gateway.usage_of(user.id, limits)
    period_start = datetime.fromtimestamp(snap.period_start, UTC)
    period_end = period_start + timedelta(days=limits.budget_period_days)
    used = snap.period_tokens + snap.reserved_tokens
    remaining = None if limits.token_budget == 0 else max(0, limits.token_budget - used)
    now = datetime.now(UTC)
    since = datetime.combine(now.date() - timedelta(days=29), datetime.min.time(), UTC)
    reports = console.stores.reports
    per_day = await reports.usage(UsageScope(user.id, since=since), ["day"])
    per_model = await reports.usage(UsageScope(user.id, since=period_start), ["model"])
    chart = day_chart({r.day: r.tokens for r in per_day if r.day is not None}, now.date())
    return page(
        request,
        "usage.html",
        account,
        limits=limits,
        weight=eff.scheduler_weight,
        snap=snap,
        used=used,
        remaining=remaining,
        period_start=period_start,
        period_end=period_end,
        chart=chart,
        per_model=sorted(per_model, key=lambda r: r.tokens, reverse=True),
    )


# -- requests ------------------------------------------------------------------------------------


@signed_in
async def requests_page(request: Request, account: ConsoleAccount) -> Response:
    records = await console_of(request).stores.reports.recent(account.user_id, limit=100)
    return page(request, "requests.html", account, records=records)


@signed_in
async def request_detail(request: Request, account: ConsoleAccount) -> Response:
    entry = await console_of(request).stores.audit_log.get(request.path_params["uuid"])
    if entry is None or entry.user_id != account.user_id:
        raise NotFound("no such request")
    return page(request, "record.html", account, entry=entry, back=f"{PREFIX}/requests")


# -- models --------------------------------------------------------------------------------------


@signed_in
async def models(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    catalog = console.gateway.catalog
    # The same rule the API listings apply: a user sees only the models their group may use.
    group = await console.stores.directory.get_group(account.group)
    rules = (access_from(group.models),)
    url = gateway_url(request)
    listed = [
        (spec, [b.name for b, _ in catalog.serving(spec.name)], snippets_for(spec, url))
        for spec in catalog.models()
        if may_use(rules, spec)
    ]
    return page(request, "models.html", account, models=listed, url=url)


def user_routes() -> list[Route]:
    return [
        Route("/", signed_in(home), methods=["GET"]),
        Route("/keys", keys, methods=["GET"]),
        Route("/keys", create_key, methods=["POST"]),
        Route("/keys/{key_id}/revoke", revoke_key, methods=["POST"]),
        Route("/usage", usage, methods=["GET"]),
        Route("/requests", requests_page, methods=["GET"]),
        Route("/requests/{uuid}", request_detail, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
    ]
