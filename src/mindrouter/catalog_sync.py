"""Each process's routing catalog kept in step with the database's backends and models.

At run time the database is the source of truth: the admin API, the CLI and the config applied
at start (or on SIGHUP) all change its rows, and each change bumps the catalog epoch in its own
transaction. Every process polls the epoch (one tiny query every `poll_interval`); when it has
moved, the process reads the rows and applies them in place:

- a new enabled backend gets its routing state, an adapter and a health check at once;
- a changed one keeps its state (requests in flight, breaker, measured speed) with the new
  values, and a new adapter when its engine, URL or key changed;
- a disabled or deleted one leaves the catalog at once, so no new request is routed to it,
  while requests already on it finish through its adapter, which is closed once they have;
- a disabled or deleted model is no longer listed or served.

A backend's `api_key` and `structured_output` are not columns (a secret stays out of the
database): a row's configuration takes them from the file's backend of the same name, if there
is one (`with_file_fields`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from mindrouter.backends.base import EngineAdapter
from mindrouter.backends.monitor import BackendMonitor
from mindrouter.backends.ollama import OllamaAdapter
from mindrouter.components import backend_adapter, backend_state, model_specs
from mindrouter.errors import NotFound
from mindrouter.observability.logging import log
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.catalog import BackendState, Catalog
from mindrouter.scheduling import CapacityGate
from mindrouter.settings import ModelSettings, Settings
from mindrouter.stores.outage import ExchangeLoop
from mindrouter.stores.ports import BreakerBoard, SlotBoard
from mindrouter.stores.records import Backend
from mindrouter.stores.sql.catalog import CatalogRows, SqlCatalog

# Changes reach every process within a second: half of it waiting for the next poll at most.
POLL_INTERVAL = 0.5


def with_file_fields(row: Backend, file: BackendConfig | None) -> BackendConfig:
    """A row's configuration with what only the file holds of the backend of the same name."""
    if file is None:
        return row.config
    return replace(row.config, api_key=file.api_key, structured_output=file.structured_output)


def _connection(b: BackendConfig) -> tuple[str, str, str | None]:
    return b.engine, b.url, b.api_key


class CatalogSync:
    def __init__(
        self,
        rows: SqlCatalog,
        settings: Settings,
        catalog: Catalog,
        adapters: dict[str, EngineAdapter],
        monitor: BackendMonitor,
        *,
        gate: CapacityGate,
        slots: SlotBoard,
        breakers: BreakerBoard,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self._rows = rows
        self.settings = settings
        self.catalog = catalog
        self.adapters = adapters
        self.monitor = monitor
        self.gate = gate
        self.slots = slots
        self.breakers = breakers
        self.poll_interval = poll_interval
        self.epoch: int | None = None
        self._retired: list[tuple[BackendState, EngineAdapter]] = []
        self._lock = asyncio.Lock()
        self._loop = ExchangeLoop(
            self._poll_logged, interval=poll_interval, retry_after=poll_interval, what="catalog"
        )

    async def start(self) -> None:
        await self.refresh(force=True)
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop(self.poll_interval)
        for _, adapter in self._retired:
            await adapter.aclose()
        self._retired.clear()

    async def set_draining(self, name: str, draining: bool) -> BackendState:
        """Drains a routed backend (or takes it back into service) in every process: its row
        first, which the other processes read at their next poll, then here at once."""
        state = next((b for b in self.catalog.backends if b.name == name), None)
        if state is None:
            raise NotFound(f"no backend named '{name}'")
        await self._rows.set_draining(name, draining)
        state.draining = draining
        return state

    async def _poll_logged(self) -> bool:
        try:
            await self.poll()
        except Exception as exc:
            log.warning("catalog poll failed", error=str(exc))
            return False
        return True

    async def poll(self) -> None:
        if await self._rows.catalog_epoch() != self.epoch:
            await self.refresh()
        await self._close_retired()

    async def refresh(self, *, force: bool = False) -> bool:
        """Reads the rows and applies them when they changed; True if anything was applied."""
        async with self._lock:
            rows = await self._rows.snapshot()
            if rows.epoch == self.epoch and not force:
                return False
            await self._apply(rows)
            self.epoch = rows.epoch
            return True

    async def _apply(self, rows: CatalogRows) -> None:
        file = {b.name: b for b in self.settings.backends}
        models = [
            ModelSettings(m.name, m.context_length, list(m.capabilities), list(m.aliases))
            for m in rows.models
            if m.enabled
        ]
        specs = model_specs(models)
        retired = frozenset(n for m in rows.models if not m.enabled for n in (m.name, *m.aliases))
        configs = [
            with_file_fields(r, file.get(r.config.name)) for r in rows.backends if r.config.enabled
        ]
        draining = {r.config.name for r in rows.backends if r.draining}
        current = {b.name: b for b in self.catalog.backends}
        before = {name: state.config for name, state in current.items()}
        states: list[BackendState] = []
        for c in configs:
            fresh = backend_state(c, specs, self.settings)
            state = current.get(c.name)
            if state is None:
                state = fresh
            else:
                # A discovering backend keeps what its health checks found.
                if c.models is not None or state.config.models is not None:
                    state.serves = fresh.serves
                state.config, state.features = c, fresh.features
            state.draining = c.name in draining
            states.append(state)
        self.catalog.replace(specs, states, retired)
        kept = {c.name: c for c in configs}
        for name, adapter in list(self.adapters.items()):
            config, was = kept.get(name), before.get(name)
            if config is None or was is None or _connection(config) != _connection(was):
                del self.adapters[name]
                self._retired.append((current[name], adapter))
        for state in states:
            if state.name not in self.adapters:
                self.adapters[state.name] = backend_adapter(state, self.catalog, self.settings)
            elif isinstance(adapter := self.adapters[state.name], OllamaAdapter):
                # Ollama is sent each model's context window: the described one, as it is now.
                adapter.context_lengths = {
                    up: self.catalog.resolve(model).context_length
                    for model, up in state.serves.items()
                }
        added = sorted(set(kept) - set(current))
        removed = sorted(set(current) - set(kept))
        await self.slots.track(states)
        await self.breakers.track(states)
        await self.monitor.retarget()
        if added or removed:
            log.info("catalog changed", added=added, removed=removed, epoch=rows.epoch)
        # Requests waiting for a model may fit on a backend that just arrived.
        for spec in self.catalog.models():
            self.gate.release(spec.name)

    async def _close_retired(self) -> None:
        """Closes the adapters of removed backends once their last request has ended."""
        done = [(s, a) for s, a in self._retired if s.in_flight == 0]
        self._retired = [(s, a) for s, a in self._retired if s.in_flight > 0]
        for _, adapter in done:
            await adapter.aclose()
