"""The admin REST API under /admin: groups, users, keys, backends, models and the audit trail.

Admin keys only: no key or a bad one is 401, a valid non-admin key is 403. Errors have the
OpenAI shape (`{"error": {"message", "type", "param", "code"}}`) whichever app mounts the
router, because the route class turns gateway errors into responses itself. Request bodies are
pydantic models and responses the stores' dataclasses (a backend's row shown flat, `BackendOut`),
so the OpenAPI document describes both.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS, date_problem, text_problem
from mindrouter.errors import Forbidden, InvalidRequest, MindRouterError
from mindrouter.http.errors import error_response, request_id_of
from mindrouter.identity.authenticate import Authenticator
from mindrouter.identity.principal import Principal
from mindrouter.routing.backend_config import STORED, BackendConfig, BackendModel, Engine
from mindrouter.stores.audit_records import AuditEntry, AuditFilter, AuditStatus
from mindrouter.stores.records import (
    ApiKeyInfo,
    Backend,
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

Capability = Literal["chat", "vision", "embedding", "rerank", "tools", "thinking"]


def _storable_text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _storable_date(value: datetime) -> datetime:
    problem = date_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# Every string and date the API stores passes the checks the YAML loader applies too.
Text = Annotated[str, AfterValidator(_storable_text)]
Date = Annotated[datetime, AfterValidator(_storable_date)]
ModelPatterns = list[Annotated[Text, Field(min_length=1, max_length=200)]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GroupIn(_Body):
    name: Text = Field(min_length=1, max_length=100)
    scheduler_weight: float = Field(1.0, gt=0, allow_inf_nan=False)
    token_budget: int = Field(0, ge=0, le=INT8_MAX, description="tokens per period; 0 = unlimited")
    rpm: int = Field(0, ge=0, le=INT4_MAX, description="requests per minute; 0 = unlimited")
    max_concurrent: int = Field(
        0, ge=0, le=INT4_MAX, description="requests in flight; 0 = unlimited"
    )
    budget_period_days: int = Field(30, ge=1, le=MAX_EXPIRES_DAYS)
    models: ModelPatterns | None = Field(
        None, description="fnmatch patterns of the models its users may use; null: every model"
    )


class Overrides(_Body):
    """Per-user limits; null (or absent) inherits the group's value."""

    scheduler_weight: float | None = Field(None, gt=0, allow_inf_nan=False)
    token_budget: int | None = Field(None, ge=0, le=INT8_MAX)
    rpm: int | None = Field(None, ge=0, le=INT4_MAX)
    max_concurrent: int | None = Field(None, ge=0, le=INT4_MAX)
    budget_period_days: int | None = Field(None, ge=1, le=MAX_EXPIRES_DAYS)


class GroupPatch(Overrides):
    """Only the fields sent change; a group's limits cannot be null."""

    name: Text | None = Field(None, min_length=1, max_length=100)
    models: ModelPatterns | None = Field(
        None, description="fnmatch patterns of the models its users may use; null: every model"
    )


class UserIn(Overrides):
    name: Text = Field(min_length=1, max_length=100)
    group: Text = Field(max_length=100)
    active: bool = True


class UserPatch(Overrides):
    """Only the fields sent change; a limit sent as null goes back to the group's value."""

    name: Text | None = Field(None, min_length=1, max_length=100)
    group: Text | None = Field(None, max_length=100)
    active: bool | None = None


class KeyIn(_Body):
    user: Text = Field(max_length=100)
    admin: bool = False
    name: Text | None = Field(None, max_length=100)
    expires_days: int | None = Field(
        None, ge=1, le=MAX_EXPIRES_DAYS, description="valid for this many days"
    )
    expires_at: Date | None = None


class KeyExpiry(_Body):
    expires_at: Date | None = Field(description="null: the key never expires")


class ServedModel(_Body):
    name: Text = Field(min_length=1, max_length=200)
    upstream: Text | None = Field(None, max_length=200)


def _served(models: list[ServedModel] | None) -> list[BackendModel] | None:
    if models is None:
        return None
    return [BackendModel(m.name, m.upstream or m.name) for m in models]


class BackendIn(_Body):
    name: Text = Field(min_length=1, max_length=100)
    engine: Engine
    url: Text = Field(pattern=r"^https?://", max_length=500)
    gpu: Text | None = Field(None, max_length=50)
    max_concurrent: int = Field(8, ge=1, le=INT4_MAX)
    priority: int = Field(0, ge=-INT4_MAX, le=INT4_MAX)
    enabled: bool = True
    models: list[ServedModel] | None = None

    def config(self) -> BackendConfig:
        return BackendConfig(**self.model_dump(exclude={"models"}), models=_served(self.models))


class BackendPatch(_Body):
    engine: Engine | None = None
    url: Text | None = Field(None, pattern=r"^https?://", max_length=500)
    gpu: Text | None = Field(None, max_length=50)
    max_concurrent: int | None = Field(None, ge=1, le=INT4_MAX)
    priority: int | None = Field(None, ge=-INT4_MAX, le=INT4_MAX)
    enabled: bool | None = None
    models: list[ServedModel] | None = None

    def changes(self) -> dict[str, Any]:
        """The fields sent, as the values of `BackendConfig`'s fields of the same names."""
        changes = self.model_dump(exclude_unset=True, exclude={"models"})
        if "models" in self.model_fields_set:
            changes["models"] = _served(self.models)
        return changes


class BackendOut(BaseModel):
    """A backend as the API shows it: its row's stored configuration, flat, between the row's
    id and the time it last changed (the file-only fields are never shown)."""

    id: int
    name: str
    engine: str
    url: str
    gpu: str | None
    max_concurrent: int
    priority: int
    enabled: bool
    models: list[BackendModel] | None
    updated_at: datetime

    @classmethod
    def of(cls, row: Backend) -> BackendOut:
        stored = {f: getattr(row.config, f) for f in ("name", *STORED)}
        return cls(id=row.id, **stored, updated_at=row.updated_at)


class ModelIn(_Body):
    name: Text = Field(min_length=1, max_length=200)
    context_length: int = Field(8192, ge=1, le=INT4_MAX)
    capabilities: list[Capability] = Field(default_factory=lambda: list[Capability](["chat"]))
    aliases: list[Annotated[Text, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list
    )
    enabled: bool = True


class ModelPatch(_Body):
    context_length: int | None = Field(None, ge=1, le=INT4_MAX)
    capabilities: list[Capability] | None = None
    aliases: list[Annotated[Text, Field(min_length=1, max_length=200)]] | None = None
    enabled: bool | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


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
