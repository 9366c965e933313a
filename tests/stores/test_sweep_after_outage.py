"""After an outage of the database longer than `instance_stale_s`, every replica's heartbeat
has lapsed: the first replica back must not sweep the others' requests, which are still
running, while a replica that really died is still swept once the survivor has been back for
`instance_stale_s`."""

from __future__ import annotations

import pytest

from mindrouter.pipeline.recovery import Recovery
from mindrouter.stores.limits import MemoryLimitStore
from mindrouter.stores.sql import SqlStores, open_stores
from mindrouter.stores.sql.instances import SqlInstances

from .conftest import FAST_HASHER, SessionDatabases, unique
from .test_audit import start

STALE_S = 15.0


class Reachable:
    """The real ledger, behind a switch that stands for the database being out of reach (its
    heartbeats then fail)."""

    def __init__(self, ledger: SqlInstances) -> None:
        self.ledger = ledger
        self.down = False

    def __getattr__(self, name: str) -> object:
        if self.down and name == "heartbeat":

            async def unreachable(*args: object) -> list[str]:
                raise OSError("the database is out of reach")

            return unreachable
        return getattr(self.ledger, name)


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


async def _status(stores: SqlStores, uuid: str) -> str | None:
    found = await stores.audit_log.get(uuid)
    return found.status if found else None


@pytest.mark.parametrize("engine", ["postgresql"])
async def test_the_first_replica_back_sweeps_only_the_dead(
    engine: str, session_databases: SessionDatabases
) -> None:
    stores = open_stores(session_databases.url(engine), hasher=FAST_HASHER)
    clock = Clock()
    ledgers = {name: Reachable(stores.instances) for name in ("a", "b", "dead")}
    replicas = {
        name: Recovery(ledger, MemoryLimitStore(), stale_s=STALE_S, wall=clock)  # type: ignore[arg-type]
        for name, ledger in ledgers.items()
    }
    try:
        records = {}
        for name, r in replicas.items():
            await r.start()
            record = start(unique("u"), instance_id=r.instance_id)
            await stores.audit.begin(record)
            records[name] = record.uuid
            await r.tick()
        # The database is out of reach for 30 s; "dead" dies meanwhile.
        for ledger in ledgers.values():
            ledger.down = True
        clock.now += 1
        for name in ("a", "b"):
            with pytest.raises(OSError):
                await replicas[name].tick()
        clock.now += 30
        for ledger in ledgers.values():
            ledger.down = False
        # "a" is back first and finds both others stale: it sweeps neither yet.
        assert await replicas["a"].tick() == 0
        clock.now += 0.5
        await replicas["b"].tick()
        assert await _status(stores, records["b"]) == "pending"
        # A heartbeat missed now and then is no outage: it does not hold the sweep back again.
        ledgers["a"].down = True
        clock.now += 3
        with pytest.raises(OSError):
            await replicas["a"].tick()
        ledgers["a"].down = False
        # Once "a" has reached the database for `instance_stale_s`, the dead one is swept; "b",
        # alive and renewing, is not.
        for _ in range(5):
            clock.now += 3
            await replicas["b"].tick()
            await replicas["a"].tick()
        assert await _status(stores, records["dead"]) == "interrupted"
        assert await _status(stores, records["b"]) == "pending"
        assert await _status(stores, records["a"]) == "pending"
    finally:
        await stores.aclose()
