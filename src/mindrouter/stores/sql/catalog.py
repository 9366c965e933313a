"""Backends and models as database rows: what the admin API and config sync change, and what
every gateway process routes by.

Each change bumps the catalog epoch in its own transaction, so the processes polling it re-read
the rows (`snapshot`) within a second. Rows are named by their unique name. Values are checked
(`checks`) where a wrong one would only show up later as a confusing routing failure (an unknown
engine or capability, a bad URL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.errors import NotFound
from mindrouter.routing.backend_config import STORED, BackendConfig, BackendModel
from mindrouter.stores.records import Backend, Model, ModelChanges
from mindrouter.stores.sql.checks import check_backend, check_model
from mindrouter.stores.sql.epoch import (
    CATALOG_EPOCH_ROW,
    bump_catalog_epoch,
    poll_epoch,
    read_catalog_epoch,
)
from mindrouter.stores.sql.schema import backends, models
from mindrouter.stores.sql.transactions import AnyRow, reading, utcnow, writing


def backend_values(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Column values for some of a backend's stored fields, with the served models as JSON."""
    unknown = sorted(set(changes) - set(STORED))
    if unknown:
        raise ValueError(f"a backend's {', '.join(unknown)} is not stored in the database")
    values = dict(changes)
    if values.get("models") is not None:
        values["models"] = [{"name": m.name, "upstream": m.upstream} for m in values["models"]]
    return values


def stored_values(config: BackendConfig) -> dict[str, Any]:
    """Column values for every stored field of `config` (all but its name and file-only ones)."""
    return backend_values({f: getattr(config, f) for f in STORED})


def backend_from_row(row: AnyRow) -> Backend:
    served = row.models
    config = BackendConfig(
        name=row.name,
        engine=row.engine,
        url=row.url,
        gpu=row.gpu,
        max_concurrent=row.max_concurrent,
        priority=row.priority,
        enabled=bool(row.enabled),
        models=None
        if served is None
        else [BackendModel(m["name"], m.get("upstream", m["name"])) for m in served],
    )
    return Backend(id=row.id, config=config, updated_at=row.updated_at, draining=bool(row.draining))


def model_from_row(row: AnyRow) -> Model:
    return Model(
        id=row.id,
        name=row.name,
        context_length=row.context_length,
        capabilities=list(row.capabilities),
        aliases=list(row.aliases),
        enabled=bool(row.enabled),
        updated_at=row.updated_at,
    )


@dataclass(frozen=True, slots=True)
class CatalogRows:
    epoch: int
    backends: list[Backend]
    models: list[Model]


class SqlCatalog:
    def __init__(self, engine: AsyncEngine, polls: AsyncEngine | None = None) -> None:
        self.engine = engine
        self._polls = polls or engine  # the epoch polls' engine (`epoch.poll_epoch`)

    async def catalog_epoch(self) -> int:
        return await poll_epoch(self._polls, CATALOG_EPOCH_ROW)

    async def snapshot(self) -> CatalogRows:
        """The epoch with the backends and models it counts, read in one transaction."""
        async with reading(self.engine) as conn:
            epoch = await read_catalog_epoch(conn)
            backend_rows = await conn.execute(select(backends).order_by(backends.c.id))
            model_rows = await conn.execute(select(models).order_by(models.c.id))
            return CatalogRows(
                epoch,
                [backend_from_row(r) for r in backend_rows],
                [model_from_row(r) for r in model_rows],
            )

    # -- backends ------------------------------------------------------------------------------

    async def list_backends(self) -> list[Backend]:
        async with reading(self.engine) as conn:
            rows = await conn.execute(select(backends).order_by(backends.c.name))
            return [backend_from_row(r) for r in rows]

    async def get_backend(self, name: str) -> Backend:
        async with reading(self.engine) as conn:
            row = (await conn.execute(select(backends).where(backends.c.name == name))).first()
        if row is None:
            raise NotFound(f"no backend named {name!r}")
        return backend_from_row(row)

    async def create_backend(self, config: BackendConfig) -> Backend:
        """A row for `config`; its file-only fields are not stored."""
        values = stored_values(config)
        check_backend(values)
        now = utcnow()
        name = config.name
        async with writing(self.engine, f"a backend named {name!r} already exists") as conn:
            await conn.execute(
                insert(backends).values(name=name, created_at=now, updated_at=now, **values)
            )
            await bump_catalog_epoch(conn)
        return await self.get_backend(name)

    async def update_backend(self, name: str, changes: Mapping[str, Any]) -> Backend:
        """Changes the stored fields (of `BackendConfig`) given in `changes`, the others kept."""
        values = backend_values(changes)
        check_backend(values)
        await self._update(backends, name, values, "backend")
        return await self.get_backend(name)

    async def set_draining(self, name: str, draining: bool) -> Backend:
        """Drains the backend (or takes it back into service) in every process."""
        await self._update(backends, name, {"draining": draining}, "backend")
        return await self.get_backend(name)

    async def delete_backend(self, name: str) -> None:
        await self._delete(backends, name, "backend")

    # -- models --------------------------------------------------------------------------------

    async def list_models(self) -> list[Model]:
        async with reading(self.engine) as conn:
            rows = await conn.execute(select(models).order_by(models.c.name))
            return [model_from_row(r) for r in rows]

    async def get_model(self, name: str) -> Model:
        async with reading(self.engine) as conn:
            row = (await conn.execute(select(models).where(models.c.name == name))).first()
        if row is None:
            raise NotFound(f"no model named {name!r}")
        return model_from_row(row)

    async def create_model(
        self,
        name: str,
        *,
        context_length: int = 8192,
        capabilities: list[str] | None = None,
        aliases: list[str] | None = None,
        enabled: bool = True,
    ) -> Model:
        values: dict[str, Any] = {
            "context_length": context_length,
            "capabilities": capabilities if capabilities is not None else ["chat"],
            "aliases": aliases or [],
            "enabled": enabled,
        }
        check_model(values)
        now = utcnow()
        async with writing(self.engine, f"a model named {name!r} already exists") as conn:
            await conn.execute(
                insert(models).values(name=name, created_at=now, updated_at=now, **values)
            )
            await bump_catalog_epoch(conn)
        return await self.get_model(name)

    async def update_model(self, name: str, changes: ModelChanges) -> Model:
        values: dict[str, Any] = dict(changes)
        check_model(values)
        await self._update(models, name, values, "model")
        return await self.get_model(name)

    async def delete_model(self, name: str) -> None:
        await self._delete(models, name, "model")

    # -- shared --------------------------------------------------------------------------------

    async def _update(self, table: Table, name: str, values: dict[str, Any], what: str) -> None:
        async with writing(self.engine) as conn:
            result = await conn.execute(
                update(table).where(table.c.name == name).values(updated_at=utcnow(), **values)
            )
            if result.rowcount == 0:
                raise NotFound(f"no {what} named {name!r}")
            await bump_catalog_epoch(conn)

    async def _delete(self, table: Table, name: str, what: str) -> None:
        async with writing(self.engine) as conn:
            result = await conn.execute(delete(table).where(table.c.name == name))
            if result.rowcount == 0:
                raise NotFound(f"no {what} named {name!r}")
            await bump_catalog_epoch(conn)
