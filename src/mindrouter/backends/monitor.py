"""Periodic health checks and model discovery for every backend.

Each round probes all backends at once (`probe.py`) and folds the answers into the routing state:
healthy or not, the engine's queue, which models are resident ("loaded" is refreshed every
round, never set once and left), and — for backends configured without a model list — which
models they serve, merged into the catalog with the context length the engine reports.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from mindrouter.backends.probe import (
    OllamaShown,
    Probe,
    probe_llamacpp,
    probe_ollama,
    probe_openai,
    probe_vllm,
)
from mindrouter.observability.logging import log
from mindrouter.routing.catalog import BackendState, Catalog
from mindrouter.tasks import stop_task


@dataclass(frozen=True, slots=True)
class MonitorTarget:
    name: str
    engine: str
    url: str
    discover: bool  # no model list in the config: serve what the backend reports
    api_key: str | None = None


class BackendMonitor:
    def __init__(
        self,
        catalog: Catalog,
        targets: list[MonitorTarget],
        *,
        interval: float = 10.0,
        timeout: float = 5.0,
    ) -> None:
        self.catalog = catalog
        self.targets = targets
        self.interval = interval
        self.timeout = timeout
        self._states = {b.name: b for b in catalog.backends}
        self._shown: dict[str, dict[str, OllamaShown]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={"content-type": "application/json"},
        )
        await self.check_all()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check_all()
            except Exception:
                log.exception("health round failed")

    async def retarget(self, targets: list[MonitorTarget]) -> None:
        """Checks `targets` (the catalog's backends, which changed) from now on; new ones and
        ones whose address changed are checked at once, before routing relies on them."""
        before = {t.name: t for t in self.targets}
        self.targets = targets
        self._states = {b.name: b for b in self.catalog.backends}
        fresh = [t for t in targets if before.get(t.name) != t]
        if fresh and self._session is not None:
            await asyncio.gather(*(self.check(t) for t in fresh))

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(t) for t in self.targets))

    async def check(self, target: MonitorTarget) -> None:
        state = self._states.get(target.name)
        if state is None:
            return  # removed from the catalog since the round began
        try:
            probe = await self._probe(target)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            probe = Probe(False, f"{type(exc).__name__}: {exc}".strip())
        was = state.healthy
        self.apply(state, target, probe)
        if was != state.healthy:
            log.warning(
                "backend health changed",
                backend=target.name,
                healthy=state.healthy,
                error=probe.error,
            )

    async def _probe(self, t: MonitorTarget) -> Probe:
        assert self._session is not None
        s = self._session
        if t.engine == "vllm":
            return await probe_vllm(s, t.url)
        if t.engine == "llamacpp":
            return await probe_llamacpp(s, t.url)
        if t.engine == "ollama":
            return await probe_ollama(s, t.url, self._shown.setdefault(t.name, {}))
        headers = {"authorization": f"Bearer {t.api_key}"} if t.api_key else None
        return await probe_openai(s, t.url, headers)

    def apply(self, state: BackendState, target: MonitorTarget, probe: Probe) -> None:
        state.healthy = probe.healthy
        state.last_error = probe.error
        if not probe.healthy:
            return
        if target.discover and probe.models:
            served: dict[str, str] = {}
            for upstream, context in probe.models.items():
                model = self.catalog.add_discovered(
                    upstream, context, probe.capabilities.get(upstream)
                )
                if model is not None:
                    served[model] = upstream
            state.serves = served
        by_upstream = {up: model for model, up in state.serves.items()}
        if probe.loaded is None:
            state.loaded = set(state.serves)
        else:
            state.loaded = {by_upstream[up] for up in probe.loaded if up in by_upstream}
        state.waiting = probe.waiting or 0.0
