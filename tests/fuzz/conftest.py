from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.fuzz.probe import Volley
from tests.fuzz.target import Fleet, start_fleet
from tests.gateway.databases import fresh_database

DATABASES = ("sqlite", "postgresql")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("fuzz")
    with ExitStack() as stack:
        urls = {name: stack.enter_context(fresh_database(name, workdir)) for name in DATABASES}
        f = start_fleet(urls, workdir)
        stack.callback(f.close)
        yield f


@pytest.fixture(scope="module")
def volley(fleet: Fleet) -> Iterator[Volley]:
    v = Volley(fleet.targets)
    try:
        yield v
    finally:
        v.close()
