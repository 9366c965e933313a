"""The admin REST API under /admin: groups, users, keys, backends, models and the audit trail.

Admin keys only: no key or a bad one is 401, a valid non-admin key is 403. Errors have the
OpenAI shape (`{"error": {"message", "type", "param", "code"}}`) whichever app mounts the
router, because the route class turns gateway errors into responses itself. Request bodies are
pydantic models (`admin_bodies.py`) and responses the stores' dataclasses (a backend's row shown
flat, `BackendOut`), so the OpenAPI document describes both.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from mindrouter.errors import Forbidden, InvalidRequest, MindRouterError
from mindrouter.http.admin_bodies import (
    BackendIn,
    BackendOut,
    BackendPatch,
    Date,
    ErrorBody,
    GroupIn,
    GroupPatch,
    KeyExpiry,
    KeyIn,
    ModelIn,
    ModelPatch,
    UserIn,
    UserPatch,
)
from mindrouter.http.errors import error_response, request_id_of
from mindrouter.identity.authenticate import Authenticator
from mindrouter.identity.principal import Principal
from mindrouter.stores.audit_records import AuditEntry, AuditFilter, AuditStatus
from mindrouter.stores.records import (
    ApiKeyInfo,
    CreatedKey,
    Group,
    GroupChanges,
    GroupLimits,
    LimitOverrides,
    Model,
    ModelChanges,
    User,
    UserChanges,
)
from mindrouter.stores.sql.audit_log import SqlAuditLog
from mindrouter.stores.sql.bundle import SqlStores
from mindrouter.stores.sql.catalog import SqlCatalog
from mindrouter.stores.sql.directory import SqlDirectory
from mindrouter.stores.sql.keys import SqlKeyStore


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _validation_message(exc: RequestValidationError) -> InvalidRequest:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return InvalidRequest(f"{where}: {message}", where)


def _admin_route(authenticator: Authenticator) -> type[APIRoute]:
    async def require_admin(request: Request) -> Principal:
        principal = await authenticator.authenticate(request.headers)
        if not principal.is_admin:
            raise Forbidden("this endpoint needs an admin API key")
        return principal

    class AdminRoute(APIRoute):
        """Checks the admin key on the headers before the body is read (FastAPI would read and
        parse the body before any dependency ran), and turns gateway and validation errors into
        OpenAI-shaped error responses."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    await require_admin(request)
                    # Read here, where a refusal (413, 408) is still ours to shape; FastAPI then
                    # finds the body already read.
                    await request.body()
                    return await handler(request)
                except MindRouterError as exc:
                    return error_response(exc, "openai", request_id_of(request))
                except RequestValidationError as exc:
                    err = _validation_message(exc)
                    return error_response(err, "openai", request_id_of(request))

            return guarded

    return AdminRoute


def admin_router(stores: SqlStores, authenticator: Authenticator) -> APIRouter:
    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody} for code in (400, 401, 403, 404)
    }
    router = APIRouter(
        prefix="/admin", tags=["admin"], route_class=_admin_route(authenticator), responses=errors
    )

    def changed() -> None:
        # This process sees the change at once; the others at their next epoch poll.
        authenticator.invalidate()

    _group_routes(router, stores.directory, changed)
    _user_routes(router, stores.directory, changed)
    _key_routes(router, stores.keys, changed)
    _backend_routes(router, stores.catalog)
    _model_routes(router, stores.catalog)
    _audit_routes(router, stores.audit_log)
    return router


def _group_routes(router: APIRouter, directory: SqlDirectory, changed: Callable[[], None]) -> None:
    @router.get("/groups")
    async def list_groups() -> list[Group]:
        return await directory.list_groups()

    @router.post("/groups", status_code=201)
    async def create_group(body: GroupIn) -> Group:
        limits = GroupLimits(**body.model_dump(exclude={"name", "models"}))
        return await directory.create_group(body.name, limits, body.models)

    @router.patch("/groups/{name}")
    async def update_group(name: str, body: GroupPatch) -> Group:
        changes = cast(GroupChanges, body.model_dump(exclude_unset=True))
        group = await directory.update_group(name, changes)
        changed()
        return group

    @router.delete("/groups/{name}", status_code=204)
    async def delete_group(name: str) -> None:
        await directory.delete_group(name)


def _user_routes(router: APIRouter, directory: SqlDirectory, changed: Callable[[], None]) -> None:
    @router.get("/users")
    async def list_users(group: str | None = None) -> list[User]:
        return await directory.list_users(group)

    @router.post("/users", status_code=201)
    async def create_user(body: UserIn) -> User:
        overrides = LimitOverrides(**body.model_dump(exclude={"name", "group", "active"}))
        return await directory.create_user(
            body.name, body.group, active=body.active, overrides=overrides
        )

    @router.patch("/users/{name}")
    async def update_user(name: str, body: UserPatch) -> User:
        user = await directory.update_user(
            name, cast(UserChanges, body.model_dump(exclude_unset=True))
        )
        changed()
        return user

    @router.delete("/users/{name}", status_code=204)
    async def delete_user(name: str) -> None:
        await directory.delete_user(name)
        changed()


def _key_routes(router: APIRouter, keys: SqlKeyStore, changed: Callable[[], None]) -> None:
    @router.get("/keys")
    async def list_keys(user: str | None = None) -> list[ApiKeyInfo]:
        return await keys.list_keys(user)

    @router.post("/keys", status_code=201, description="The response holds the key, once.")
    async def create_key(body: KeyIn) -> CreatedKey:
        expires = _utc(body.expires_at)
        if body.expires_days is not None:
            expires = datetime.now(UTC) + timedelta(days=body.expires_days)
        return await keys.create_key(
            body.user, admin=body.admin, expires_at=expires, name=body.name
        )

    @router.post("/keys/{ref}/revoke", description="`ref`: the key's id or its mr2_ prefix.")
    async def revoke_key(ref: str) -> ApiKeyInfo:
        info = await keys.revoke_key(ref)
        changed()
        return info

    @router.patch("/keys/{ref}", description="Sets or clears the expiry.")
    async def set_key_expiry(ref: str, body: KeyExpiry) -> ApiKeyInfo:
        info = await keys.set_key_expiry(ref, _utc(body.expires_at))
        changed()
        return info


def _backend_routes(router: APIRouter, catalog: SqlCatalog) -> None:
    @router.get("/backends")
    async def list_backends() -> list[BackendOut]:
        return [BackendOut.of(b) for b in await catalog.list_backends()]

    @router.post("/backends", status_code=201)
    async def create_backend(body: BackendIn) -> BackendOut:
        return BackendOut.of(await catalog.create_backend(body.config()))

    @router.patch("/backends/{name}")
    async def update_backend(name: str, body: BackendPatch) -> BackendOut:
        return BackendOut.of(await catalog.update_backend(name, body.changes()))

    @router.delete("/backends/{name}", status_code=204)
    async def delete_backend(name: str) -> None:
        await catalog.delete_backend(name)


def _model_routes(router: APIRouter, catalog: SqlCatalog) -> None:
    @router.get("/models")
    async def list_models() -> list[Model]:
        return await catalog.list_models()

    @router.post("/models", status_code=201)
    async def create_model(body: ModelIn) -> Model:
        return await catalog.create_model(**body.model_dump())

    @router.patch("/models/{name}")
    async def update_model(name: str, body: ModelPatch) -> Model:
        changes = cast(ModelChanges, body.model_dump(exclude_unset=True))
        return await catalog.update_model(name, changes)

    @router.delete("/models/{name}", status_code=204)
    async def delete_model(name: str) -> None:
        await catalog.delete_model(name)


def _audit_routes(router: APIRouter, audit_log: SqlAuditLog) -> None:
    @router.get("/audit", description="Newest first, with messages and token counts.")
    async def query_audit(
        *,
        user: str | None = None,
        key: str | None = Query(None, description="a key id or its mr2_ prefix"),
        model: str | None = None,
        status: AuditStatus | None = None,
        since: Date | None = None,
        until: Date | None = None,
        limit: int = Query(100, ge=1, le=1000),
    ) -> list[AuditEntry]:
        where = AuditFilter(user, key, model, status, _utc(since), _utc(until), limit)
        return await audit_log.query(where)
