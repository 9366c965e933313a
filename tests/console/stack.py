"""A gateway with its console in front of the simulated engines, and a browser-like client.

`ConsoleStack.session()` is an httpx client that keeps cookies, as a browser does; `sign_in`
posts the sign-in form with the page's CSRF token. Accounts are made straight in the database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from mindrouter.app import build_app
from mindrouter.identity.passwords import Passwords
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.stores.sql import open_stores
from tests.gateway.stack import (
    SIM_ENGINES,
    gateway_config,
    prepare_database,
    sim_config,
    sqlite_url,
)

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
PASSWORD = "correct horse battery"


@dataclass
class ConsoleStack:
    gateway: ThreadServer
    sims: list[ThreadServer]
    settings: Settings
    key: str
    extra: list[ThreadServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.gateway.url

    def close(self) -> None:
        for s in [self.gateway, *self.sims, *self.extra]:
            s.stop()

    def run(self, coro: Any) -> Any:
        return run_apart(coro)

    def add_account(
        self, name: str, group: str = "testers", *, admin: bool = False, password: str = PASSWORD
    ) -> None:
        async def add() -> None:
            stores = open_stores(self.settings.database_url)
            try:
                if await stores.accounts.by_name(name) is None:
                    await stores.directory.create_user(name, group)
                hashed = await Passwords(time_cost=1, memory_cost=1024).hash(password)
                await stores.accounts.save(name, password_hash=hashed, is_admin=admin)
            finally:
                await stores.aclose()

        self.run(add())

    def session(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, follow_redirects=False, timeout=30)

    def sign_in(self, name: str, password: str = PASSWORD) -> httpx.Client:
        client = self.session()
        r = client.post(
            "/console/sign-in",
            data={"csrf": csrf_of(client), "username": name, "password": password},
        )
        assert r.status_code == 303, r.text
        return client


def run_apart(coro: Any) -> Any:
    """Runs a coroutine to completion on a thread of its own: Playwright's synchronous API keeps
    an event loop running on the test's thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def csrf_of(client: httpx.Client, path: str = "/console/sign-in") -> str:
    page = client.get(path)
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def start_console_stack(**top: Any) -> ConsoleStack:
    sims = {e: ThreadServer(build_sim_app(sim_config(e))).start() for e in SIM_ENGINES}
    settings = settings_from_dict(
        gateway_config({e: s.url for e, s in sims.items()}, database_url=sqlite_url(), **top)
    )
    key = run_apart(prepare_database(settings))
    gateway = ThreadServer(build_app(settings)).start()
    return ConsoleStack(gateway=gateway, sims=list(sims.values()), settings=settings, key=key)
