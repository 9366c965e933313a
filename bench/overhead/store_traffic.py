"""The least store traffic a gateway that limits, audits and accounts every request must make,
for the floors (`floor_stores`, `floor_streams --modes stores`) to add to a bare relay.

Per request: one Redis script whose reply is waited for before the engine is called (the
admission); one audit row inserted and committed before it, group-committed (rows that wait
together go in one statement); at the end, one Redis script written and not waited for (the
settlement) and the row's outcome, gathered with others for up to 50 ms into one statement.
Redis is spoken on one pipelined connection whose replies hiredis reads in the protocol's
callback; PostgreSQL through two asyncpg connections (begins, outcomes). `fast` sets
`synchronous_commit = off` on both, as the gateway's `audit_commit: fast` does.

Configured from the environment (the relays run as processes of their own): FLOOR_DSN,
FLOOR_AUDIT (durable or fast), FLOOR_REDIS (host:port:db) and FLOOR_PREFIX (Redis keys).
`prepare` is the measuring side's: the database a relay needs, what was written to it, and its
removal.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import asyncpg
import hiredis

from bench.overhead import targets

ADMIT = (
    b"local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) "
    b"redis.call('INCRBY', KEYS[2], ARGV[1]) return n"
)
SETTLE = b"redis.call('DECR', KEYS[1]) return redis.call('INCRBY', KEYS[2], ARGV[1])"
TABLE = """
CREATE TABLE records (
    request_id text PRIMARY KEY, user_id integer NOT NULL,
    key_id integer NOT NULL, model text NOT NULL, backend text NOT NULL, dialect text NOT NULL,
    status text NOT NULL, prompt_tokens integer NOT NULL, completion_tokens integer,
    started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz
)
"""
BEGIN = (
    "INSERT INTO records (request_id, user_id, key_id, model, backend, dialect, status, "
    "prompt_tokens) SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], "
    "$5::text[], $6::text[], $7::text[], $8::int[])"
)
OUTCOME = (
    "UPDATE records AS r SET status = 'ok', completion_tokens = o.tokens, finished_at = now() "
    "FROM unnest($1::text[], $2::int[]) AS o(id, tokens) WHERE r.request_id = o.id"
)


def resp(*args: bytes) -> bytes:
    """One Redis command in the protocol's wire form."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Pipe(asyncio.Protocol):
    """Commands written as they come; replies come back in their order, None marking one
    nobody waits for."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: list[asyncio.Future[Any] | None] = []
        self.head = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            fut = self.waiting[self.head]
            self.head += 1
            if self.head > 1024:
                del self.waiting[: self.head]
                self.head = 0
            if fut is not None and not fut.done():
                if isinstance(reply, hiredis.ReplyError):
                    fut.set_exception(reply)
                else:
                    fut.set_result(reply)

    def send(self, command: bytes) -> asyncio.Future[Any]:
        assert self.transport is not None
        self.transport.write(command)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        return fut

    def send_unanswered(self, command: bytes) -> None:
        assert self.transport is not None
        self.transport.write(command)
        self.waiting.append(None)


class Stores:
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port, db = os.environ["FLOOR_REDIS"].split(":")
        prefix = os.environ["FLOOR_PREFIX"].encode()
        _, self.pipe = await loop.create_connection(Pipe, host, int(port))
        await self.pipe.send(resp(b"SELECT", db.encode()))
        admit = await self.pipe.send(resp(b"SCRIPT", b"LOAD", ADMIT))
        settle = await self.pipe.send(resp(b"SCRIPT", b"LOAD", SETTLE))
        live, used = prefix + b"live:bench", prefix + b"used:bench"
        self.admit_command = resp(b"EVALSHA", admit, b"2", live, used, b"16")
        self.settle_head = (b"EVALSHA", settle, b"2", live, used)
        dsn = os.environ["FLOOR_DSN"]
        self.begin_conn = await asyncpg.connect(dsn)
        self.outcome_conn = await asyncpg.connect(dsn)
        if os.environ["FLOOR_AUDIT"] == "fast":
            for conn in (self.begin_conn, self.outcome_conn):
                await conn.execute("SET synchronous_commit = off")
        self.begins: list[tuple[str, str, asyncio.Future[None]]] = []
        self.wake = asyncio.Event()
        self.outcomes: tuple[list[str], list[int]] = ([], [])
        self.tasks = [
            loop.create_task(self._write_begins()),
            loop.create_task(self._write_outcomes()),
        ]

    async def admit(self) -> None:
        await self.pipe.send(self.admit_command)

    async def begin(self, model: str) -> str:
        """The record's key (made here, as the gateway makes its request ids), once committed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = uuid4().hex
        self.begins.append((key, model, fut))
        self.wake.set()
        await fut
        return key

    def end(self, record: str, tokens: int) -> None:
        """The settlement, written at once, and the outcome, gathered."""
        self.pipe.send_unanswered(resp(*self.settle_head, b"%d" % tokens))
        self.outcomes[0].append(record)
        self.outcomes[1].append(tokens)

    async def _write_begins(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.begins = self.begins, []
            n = len(batch)
            try:
                await self.begin_conn.execute(
                    BEGIN, [b[0] for b in batch], [1] * n, [1] * n, [b[1] for b in batch],
                    ["mock"] * n, ["openai"] * n, ["pending"] * n, [16] * n,
                )  # fmt: skip
            except Exception as exc:  # each waiting request fails, the writer goes on
                for _, _, fut in batch:
                    fut.set_exception(exc)
                continue
            for _, _, fut in batch:
                fut.set_result(None)

    async def _write_outcomes(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            ids, tokens = self.outcomes
            if ids:
                self.outcomes = ([], [])
                await self.outcome_conn.execute(OUTCOME, ids, tokens)


@dataclass(frozen=True)
class StoreDatabase:
    """A stores relay's fresh PostgreSQL database (`name`) and Redis key prefix, and the
    environment (`env`) the relay's `Stores` reads them from."""

    name: str
    env: dict[str, str]

    async def rows(self) -> str:
        """The audit rows the relay wrote and how many it completed, once its last outcomes are
        written: the check that it did the store work it is measured for."""
        await asyncio.sleep(0.2)  # longer than the outcomes are gathered
        conn = await asyncpg.connect(f"{targets.PG_DSN}/{self.name}", timeout=10)
        try:
            row = await conn.fetchrow(
                "SELECT count(*) AS n, count(*) FILTER (WHERE status = 'ok') AS ok FROM records"
            )
        finally:
            await conn.close()
        return f"{row['n']} rows, {row['ok']} completed"

    async def remove(self) -> None:
        await targets._pg_execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        await targets._redis_delete(self.env["FLOOR_PREFIX"])


async def prepare(mode: str) -> StoreDatabase:
    """A fresh database with the audit table, for a relay whose audit commits are `mode`
    (durable or fast), on the benchmark's PostgreSQL and Redis."""
    name = "mrfloor_" + uuid4().hex[:12]
    await targets._pg_execute(f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(f"{targets.PG_DSN}/{name}", timeout=10)
    try:
        await conn.execute(TABLE)
    finally:
        await conn.close()
    env = {
        "FLOOR_DSN": f"{targets.PG_DSN}/{name}",
        "FLOOR_AUDIT": mode,
        "FLOOR_REDIS": targets.REDIS_URL.removeprefix("redis://").replace("/", ":"),
        "FLOOR_PREFIX": f"mrfloor:{name}:",
    }
    return StoreDatabase(name, env)
