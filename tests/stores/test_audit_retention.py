"""Audit retention run by the gateway: `audit_retention_days` blanks old prompts and outputs at
start (and hourly after), in batches, and keeps token counts and usage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from mindrouter.app import build_app
from mindrouter.settings import settings_from_dict
from mindrouter.stores.audit_records import AuditOutcome
from mindrouter.stores.sql import SqlStores

from .conftest import unique
from .test_audit import MESSAGES, start


async def test_a_purge_goes_in_batches_and_takes_every_old_record(stores: SqlStores) -> None:
    name = unique("u")
    now = datetime.now(UTC)
    old = [start(name, created_at=now - timedelta(days=40, minutes=i)) for i in range(5)]
    for record in old:
        await stores.audit.begin(record)
    await stores.audit.flush()

    assert await stores.audit_log.purge_audit(30, batch=2) >= 5
    for record in old:
        entry = await stores.audit_log.get(record.uuid)
        assert entry is not None and entry.purged and entry.messages is None
    assert await stores.audit_log.purge_audit(30, batch=2) == 0  # nothing left to do


async def test_the_gateway_purges_what_is_older_than_the_setting(
    stores: SqlStores, db_url: str
) -> None:
    group, name = unique("g"), unique("u")
    await stores.directory.create_group(group)
    user = await stores.directory.create_user(name, group)
    now = datetime.now(UTC)
    await stores.usage.add_usage(user.id, 700, now)
    old = start(name, user_id=user.id, created_at=now - timedelta(days=31))
    recent = start(name, user_id=user.id, created_at=now - timedelta(days=29))
    for record in (old, recent):
        await stores.audit.begin(record)
        outcome = AuditOutcome(status="ok", output="the answer", input_tokens=12, output_tokens=3)
        stores.audit.complete(record.uuid, outcome)
    await stores.audit.flush()

    app = build_app(settings_from_dict({"database_url": db_url, "audit_retention_days": 30}))
    retention = app.state.runtime.retention
    async with app.router.lifespan_context(app):
        # The first pass runs as the gateway starts; the bound is generous for a busy machine.
        for _ in range(1500):
            if retention.purged >= 1:  # counted once its pass has returned
                break
            await asyncio.sleep(0.02)
    assert retention.purged >= 1

    purged, kept = await stores.audit_log.get(old.uuid), await stores.audit_log.get(recent.uuid)
    assert purged is not None and kept is not None
    assert (purged.messages, purged.output, purged.purged) == (None, None, True)
    assert (purged.input_tokens, purged.output_tokens, purged.status) == (12, 3, "ok")
    assert (kept.messages, kept.output, kept.purged) == (MESSAGES, "the answer", False)
    # 700 charged directly and 15 by closing each record; the purge takes none of it back.
    assert (await stores.usage.get_usage(user.id, now)).lifetime_tokens == 730


async def test_no_retention_setting_keeps_everything(stores: SqlStores, db_url: str) -> None:
    app = build_app(settings_from_dict({"database_url": db_url}))
    async with app.router.lifespan_context(app):
        assert "audit retention" not in app.state.runtime.housekeeping.names
