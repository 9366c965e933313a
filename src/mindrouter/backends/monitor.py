"""Periodic health checks and model discovery for every backend.

Each round probes all backends at once (`probe.py`) and folds the answers into the routing state:
healthy or not, the engine's queue, which models are resident ("loaded" is refreshed every
round, never set once and left), and — for backends configured without a model list — which
models they serve, merged into the catalog with the context length the engine reports.
"""

from __future__ import annotations

import asyncio

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
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.catalog import BackendState, Catalog
from mindrouter.tasks import stop_task


def _probed(c: BackendConfig) -> tuple[str, str, bool, str | None]:
    """What a health check depends on: a change to any of it has the backend checked at once."""
    return c.engine, c.url, c.models is None, c.api_key


class BackendMonitor:
    """Checks the catalog's backends, each as its configuration is at the time."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        interval: float = 10.0,
        timeout: float = 5.0,
    ) -> None:
        self.catalog = catalog
        self.interval = interval
        self.timeout = timeout
        self._states = {b.name: b for b in catalog.backends}
        self._probed = {b.name: _probed(b.config) for b in catalog.backends}
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

    async def retarget(self) -> None:
        """Checks the catalog's backends (which changed) from now on; new ones and ones whose
        address changed are checked at once, before routing relies on them."""
        before = self._probed
        self._states = {b.name: b for b in self.catalog.backends}
        self._probed = {n: _probed(b.config) for n, b in self._states.items()}
        fresh = [b for n, b in self._states.items() if before.get(n) != self._probed[n]]
        if fresh and self._session is not None:
            await asyncio.gather(*(self.check(b) for b in fresh))

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(b) for b in list(self._states.values())))

    async def check(self, state: BackendState) -> None:
        if self._states.get(state.name) is not state:
            return  # removed from the catalog since the round began
        config = state.config
        try:
            probe = await self._probe(config)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            probe = Probe(False, f"{type(exc).__name__}: {exc}".strip())
        was = state.healthy
        self.apply(state, config, probe)
        if was != state.healthy:
            log.warning(
                "backend health changed",
                backend=config.name,
                healthy=state.healthy,
                error=probe.error,
            )

    async def _probe(self, t: BackendConfig) -> Probe:
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

    def apply(self, state: BackendState, config: BackendConfig, probe: Probe) -> None:
        """Folds `probe`, the answer of the backend as `config` describes it, into `state`."""
        state.healthy = probe.healthy
        state.last_error = probe.error
        if not probe.healthy:
            return
        # No model list in the config: serve what the backend reports.
        if config.models is None and probe.models:
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
