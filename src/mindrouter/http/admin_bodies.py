"""The admin API's request and response bodies: pydantic models, so that FastAPI checks what
comes in (ranges the store can hold, text free of NUL, dates in range) and the OpenAPI document
describes both ways. Each body becomes the stores' own type in one place (`config()`,
`changes()`, `BackendOut.of`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS, date_problem, text_problem
from mindrouter.routing.backend_config import STORED, BackendConfig, BackendModel, Engine
from mindrouter.stores.records import Backend

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
