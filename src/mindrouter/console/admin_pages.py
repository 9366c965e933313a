"""Pages for console administrators: users, groups, keys, backends, the live queue, the audit
trail and the usage export. Each reuses the stores and routing state the admin API works on;
every action is a CSRF-checked POST followed by a redirect."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS
from mindrouter.console.guard import PREFIX, admin_only, checked_form, console_of
from mindrouter.console.render import flash, page
from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.http.routing_admin_routes import backend_view
from mindrouter.identity.passwords import password_problem
from mindrouter.stores.audit_records import AuditFilter
from mindrouter.stores.records import GroupChanges, GroupLimits, UserChanges
from mindrouter.stores.sql.accounts import ConsoleAccount
from mindrouter.stores.sql.reports import UsageScope

STATUSES = ("pending", "ok", "error", "cancelled")


def _back(where: str) -> Response:
    return RedirectResponse(f"{PREFIX}/admin/{where}", status_code=303)


def _int(form: FormData, name: str, span: tuple[int, int]) -> int:
    text = str(form.get(name, "")).strip()
    if not text.isdigit() or not span[0] <= int(text) <= span[1]:
        raise InvalidRequest(f"{name}: a whole number from {span[0]} to {span[1]}", name)
    return int(text)


def _weight(form: FormData) -> float:
    try:
        value = float(str(form.get("scheduler_weight", "")))
    except ValueError:
        value = 0.0
    if not 0 < value <= 1e6:
        raise InvalidRequest("scheduler_weight: a positive number", "scheduler_weight")
    return value


def _text(form: FormData, name: str, limit: int = 100) -> str:
    text = str(form.get(name, "")).strip()
    if not text or len(text) > limit:
        raise InvalidRequest(f"{name}: 1 to {limit} characters", name)
    return text


def _day(text: str | None, name: str) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
    except ValueError:
        raise InvalidRequest(f"{name}: a date as YYYY-MM-DD", name) from None


# -- users ---------------------------------------------------------------------------------------


@admin_only
async def users(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    q = request.query_params.get("q", "").strip()
    listed = await console.stores.directory.list_users()
    if q:
        listed = [u for u in listed if q.lower() in u.name.lower()]
    accounts = await console.stores.accounts.everyone()
    groups = await console.stores.directory.list_groups()
    return page(
        request,
        "admin/users.html",
        account,
        users=listed[:500],
        accounts=accounts,
        groups=groups,
        q=q,
        more=len(listed) > 500,
    )


@admin_only
async def create_user(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    form = await checked_form(request)
    name, group = _text(form, "name"), _text(form, "group")
    password = str(form.get("password", ""))
    if password and (problem := password_problem(password)) is not None:
        raise InvalidRequest(f"password: {problem}", "password")
    await console.stores.directory.create_user(name, group)
    admin = form.get("admin") == "on"
    if password or admin:
        hashed = await console.passwords.hash(password) if password else None
        await console.stores.accounts.save(name, password_hash=hashed, is_admin=admin)
    flash(request, f"User {name} created in group {group}.")
    return _back("users")


@admin_only
async def update_user(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    form = await checked_form(request)
    name = request.path_params["name"]
    changes: UserChanges = {}
    if "group" in form:
        changes["group"] = _text(form, "group")
    if "active" in form:
        if name == account.user_name and form["active"] != "yes":
            raise InvalidRequest("you cannot deactivate yourself", "active")
        changes["active"] = form["active"] == "yes"
    if changes:
        await console.stores.directory.update_user(name, changes)
        console.authenticator.invalidate()
    if "admin" in form:
        if name == account.user_name and form["admin"] != "yes":
            raise InvalidRequest("you cannot take away your own administrator role", "admin")
        await console.stores.accounts.save(name, is_admin=form["admin"] == "yes")
    flash(request, f"User {name} updated.")
    return _back("users")


# -- groups --------------------------------------------------------------------------------------


def _limits(form: FormData) -> dict[str, Any]:
    return {
        "scheduler_weight": _weight(form),
        "token_budget": _int(form, "token_budget", (0, INT8_MAX)),
        "rpm": _int(form, "rpm", (0, INT4_MAX)),
        "max_concurrent": _int(form, "max_concurrent", (0, INT4_MAX)),
        "budget_period_days": _int(form, "budget_period_days", (1, MAX_EXPIRES_DAYS)),
    }


@admin_only
async def groups(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    listed = await console.stores.directory.list_groups()
    members: dict[str, int] = {}
    for u in await console.stores.directory.list_users():
        members[u.group] = members.get(u.group, 0) + 1
    return page(request, "admin/groups.html", account, groups=listed, members=members)


@admin_only
async def create_group(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    form = await checked_form(request)
    name = _text(form, "name")
    await console.stores.directory.create_group(name, GroupLimits(**_limits(form)))
    flash(request, f"Group {name} created.")
    return _back("groups")


@admin_only
async def update_group(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    form = await checked_form(request)
    name = request.path_params["name"]
    changes: GroupChanges = {**_limits(form)}  # type: ignore[typeddict-item]
    await console.stores.directory.update_group(name, changes)
    console.authenticator.invalidate()
    flash(request, f"Group {name} updated.")
    return _back("groups")


# -- keys ----------------------------------------------------------------------------------------


@admin_only
async def keys(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    user = request.query_params.get("user", "").strip() or None
    listed = await console.stores.keys.list_keys(user)
    return page(
        request,
        "admin/keys.html",
        account,
        keys=sorted(listed, key=lambda k: k.id, reverse=True),
        user=user or "",
        now=datetime.now(UTC),
    )


@admin_only
async def revoke_key(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    await checked_form(request)
    ref = request.path_params["key_id"]
    if not ref.isdigit():
        raise NotFound("no such API key")
    info = await console.stores.keys.revoke_key(ref)
    console.authenticator.invalidate()
    flash(request, f"Key {info.prefix} of {info.user} revoked.")
    return _back("keys")


# -- backends and the queue ----------------------------------------------------------------------


@admin_only
async def backends(request: Request, account: ConsoleAccount) -> Response:
    gateway = console_of(request).gateway
    now = gateway.views.now()
    views = [backend_view(b, now) for b in gateway.catalog.backends]
    return page(request, "admin/backends.html", account, backends=views)


async def _set_draining(request: Request, draining: bool) -> Response:
    await checked_form(request)
    b = await console_of(request).set_draining(request.path_params["name"], draining)
    flash(request, f"Backend {b.name} {'draining' if draining else 'taking work again'}.")
    return _back("backends")


@admin_only
async def drain(request: Request, account: ConsoleAccount) -> Response:
    return await _set_draining(request, True)


@admin_only
async def undrain(request: Request, account: ConsoleAccount) -> Response:
    return await _set_draining(request, False)


@admin_only
async def queue(request: Request, account: ConsoleAccount) -> Response:
    snap = console_of(request).gateway.views.queue()
    return page(request, "admin/queue.html", account, snap=snap)


# -- audit ---------------------------------------------------------------------------------------


@admin_only
async def audit(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    params = request.query_params
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status: one of {', '.join(STATUSES)}", "status")
    since = _day(params.get("since"), "since")
    until = _day(params.get("until"), "until")
    where = AuditFilter(
        user=params.get("user") or None,
        model=params.get("model") or None,
        status=status,  # type: ignore[arg-type]
        since=since,
        until=until + timedelta(days=1) if until else None,
        limit=200,
    )
    records = await console.stores.audit_log.query(where)
    return page(
        request,
        "admin/audit.html",
        account,
        records=records,
        form=dict(params),
        statuses=STATUSES,
    )


@admin_only
async def audit_record(request: Request, account: ConsoleAccount) -> Response:
    entry = await console_of(request).stores.audit_log.get(request.path_params["uuid"])
    if entry is None:
        raise NotFound("no such audit record")
    return page(request, "record.html", account, entry=entry, back=f"{PREFIX}/admin/audit")


# -- usage export --------------------------------------------------------------------------------


@admin_only
async def usage_page(request: Request, account: ConsoleAccount) -> Response:
    today = datetime.now(UTC).date()
    return page(
        request,
        "admin/usage.html",
        account,
        since=(today.replace(day=1)).isoformat(),
        until=today.isoformat(),
    )


CSV_COLUMNS = ("day", "user", "group", "model", "requests", "input_tokens", "output_tokens")


@admin_only
async def usage_csv(request: Request, account: ConsoleAccount) -> Response:
    console = console_of(request)
    since = _day(request.query_params.get("since"), "since")
    until = _day(request.query_params.get("until"), "until")
    scope = UsageScope(since=since, until=until + timedelta(days=1) if until else None)
    rows = await console.stores.reports.usage(scope, ["day", "user", "group", "model"])
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.day.isoformat() if r.day else "",
                _cell(r.user),
                _cell(r.group),
                _cell(r.model),
                r.requests,
                r.input_tokens,
                r.output_tokens,
            ]
        )
    name = f"mindrouter-usage-{since.date() if since else 'all'}-{until.date() if until else 'now'}"
    return Response(
        buffer.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{name}.csv"'},
    )


def _cell(value: str | None) -> str:
    """A text cell that a spreadsheet will not run as a formula (user and model names are
    chosen by others)."""
    text = value or ""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def admin_routes() -> list[Route]:
    return [
        Route("/admin/users", users, methods=["GET"]),
        Route("/admin/users", create_user, methods=["POST"]),
        Route("/admin/users/{name}", update_user, methods=["POST"]),
        Route("/admin/groups", groups, methods=["GET"]),
        Route("/admin/groups", create_group, methods=["POST"]),
        Route("/admin/groups/{name}", update_group, methods=["POST"]),
        Route("/admin/keys", keys, methods=["GET"]),
        Route("/admin/keys/{key_id}/revoke", revoke_key, methods=["POST"]),
        Route("/admin/backends", backends, methods=["GET"]),
        Route("/admin/backends/{name}/drain", drain, methods=["POST"]),
        Route("/admin/backends/{name}/undrain", undrain, methods=["POST"]),
        Route("/admin/queue", queue, methods=["GET"]),
        Route("/admin/audit", audit, methods=["GET"]),
        Route("/admin/audit/{uuid}", audit_record, methods=["GET"]),
        Route("/admin/usage", usage_page, methods=["GET"]),
        Route("/admin/usage.csv", usage_csv, methods=["GET"]),
    ]
