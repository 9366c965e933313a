"""One pipelined connection to Redis, for the commands every request sends (the limit store's).

Commands are written to the socket in the order they are issued (at once, or at the end of the
event loop's turn), and the replies are matched to them in that same order (Redis answers each
connection in order); nothing waits for a reply before the next command goes out. So:

- `send` writes a command and returns the future of its reply without waiting for it: the
  command is on the wire when `send` returns (or, while the connection is being opened, queued
  to be written first, in order, once it is), and Redis runs it before any command this
  process sends afterwards on the same connection;
- `call` waits for the reply, at most `timeout` seconds; its command is written at the end of
  the event loop's turn, in one write with every other command issued in that turn (a `send`
  writes them all at once, its own last);
- there is no pool to take a connection from and give back, no retry (the scripts sent here
  are not idempotent: a retried charge would count twice) and no per-command health check, so
  a command costs little more than packing it and parsing its reply (hiredis does both).

The connection is opened on the first command, and again on the first command after it was
lost; on opening it authenticates, selects the database and loads the registered scripts
(`scripts`), so that EVALSHA finds them on a server that restarted empty. A lost connection
fails every command waiting for a reply with `ConnectionError`; a reply that does not come in
time fails the command waiting for it with `TimeoutError` and closes the connection (what was
sent after it may never be answered either). Errors are redis-py's, so that callers translate
them as they do the client's.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, cast

import hiredis
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

from mindrouter.tasks import Alarm

Arg = str | bytes | int | float


class _Connection(asyncio.Protocol):
    """One socket: the futures of what was sent on it, in order, answered as replies come."""

    def __init__(self, owner: PipedRedis) -> None:
        self._owner = owner
        self._reader = hiredis.Reader(replyError=redis_errors.ResponseError)
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None
        self._unwritten: list[bytes] = []  # to be written at the end of this loop turn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def write(self, packed: bytes, future: asyncio.Future[Any], *, now: bool = True) -> None:
        """`now`: written at once (with what was left for the end of the turn before it);
        otherwise at the end of this turn of the event loop, in one write with the others."""
        self.waiting.append(future)
        unwritten = self._unwritten
        unwritten.append(packed)
        if now:
            self.flush()
        elif len(unwritten) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        unwritten = self._unwritten
        if unwritten and self.transport is not None:
            self.transport.write(unwritten[0] if len(unwritten) == 1 else b"".join(unwritten))
        unwritten.clear()

    def data_received(self, data: bytes) -> None:
        reader, waiting = self._reader, self.waiting
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            if not waiting:
                continue  # nothing asked for it (cannot happen on a healthy connection)
            future = waiting.popleft()
            if future.done():
                continue  # its caller gave up waiting
            if isinstance(reply, redis_errors.ResponseError):
                future.set_exception(_error_of(reply))
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(redis_errors.ConnectionError(f"the connection to Redis was lost: {exc}"))
        self._owner._lost(self)

    def fail(self, error: Exception) -> None:
        waiting, self.waiting = self.waiting, deque()
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        self._unwritten.clear()
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.abort()


def _error_of(reply: redis_errors.ResponseError) -> redis_errors.ResponseError:
    message = str(reply)
    if message.startswith("NOSCRIPT"):
        return redis_errors.NoScriptError(message)
    return reply


class PipedRedis:
    """A pipelined connection (see the module doc). `scripts` are loaded on every connection
    opened, before any command is sent on it."""

    def __init__(
        self,
        kwargs: Mapping[str, Any],
        *,
        unix: bool = False,
        tls: bool = False,
        timeout: float = 1.0,
        scripts: Iterable[Script] = (),
    ) -> None:
        if not timeout > 0:
            raise ValueError("the timeout must be positive")
        self._kwargs = dict(kwargs)
        self._unix = unix
        self._tls = tls
        self.timeout = timeout
        self._scripts = tuple(scripts)
        self._conn: _Connection | None = None  # open, greeted (its greeting may be in flight)
        self._opening: asyncio.Task[None] | None = None
        self._queued: list[tuple[bytes, asyncio.Future[Any]]] = []  # issued while opening
        # The commands waiting for a reply, oldest first, with their deadlines; one timer (the
        # watchdog) for the oldest: replies come in order, so it is the first to be late.
        self._deadlines: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._watchdog = Alarm()
        self.connects = 0

    @classmethod
    def like(cls, client: Redis, *, timeout: float, scripts: Iterable[Script] = ()) -> PipedRedis:
        """A connection to the server `client` connects to, as it connects (address, TLS,
        credentials, database)."""
        pool = client.connection_pool
        return cls(
            pool.connection_kwargs,
            unix=issubclass(pool.connection_class, UnixDomainSocketConnection),
            tls=issubclass(pool.connection_class, SSLConnection),
            timeout=timeout,
            scripts=scripts,
        )

    def send(self, *args: Arg) -> asyncio.Future[Any]:
        """Writes the command now (see the module doc) and returns the future of its reply,
        which nobody need wait for: a reply not in within `timeout` closes the connection
        (failing the command), as in `call`."""
        return self._issue(_pack(args), now=True)

    def _issue(self, packed: bytes, *, now: bool) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._conn is not None:
            self._conn.write(packed, future, now=now)
        else:
            self._queued.append((packed, future))
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._open())
        # The reply is due within `timeout`. One timer watches every command in flight rather
        # than one each (a timer costs a few microseconds to set and cancel, twice a request).
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        deadlines.append((loop.time() + self.timeout, future))
        self._watchdog.arm(deadlines[0][0], self._watch)
        return future

    async def call(self, *args: Arg) -> Any:
        """The command's reply, within `timeout` seconds. The command is written at the end of
        this turn of the event loop, in one write with the others issued in the turn (and at
        once with a `send` issued after it)."""
        return await self._issue(_pack(args), now=False)

    def _watch(self, now: float) -> float | None:
        """The watchdog: the oldest command still waiting whose deadline has passed fails (also
        while the connection is still being opened) and the connection is closed, since what
        was sent after it may never be answered either; then it looks again at the deadline of
        the oldest command still waiting, if any."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        if deadlines and deadlines[0][0] <= now:
            _, future = deadlines.popleft()
            future.set_exception(redis_errors.TimeoutError("Redis did not answer in time"))
            self._drop(redis_errors.TimeoutError("Redis did not answer in time"))
            while deadlines and deadlines[0][1].done():
                deadlines.popleft()
        return deadlines[0][0] if deadlines else None

    async def aclose(self) -> None:
        """Waits (at most `timeout`) for the replies still due, then closes the connection."""
        if self._opening is not None:
            await asyncio.wait({self._opening}, timeout=self.timeout)
        conn = self._conn
        pending = [f for f in conn.waiting if not f.done()] if conn is not None else []
        if pending:
            await asyncio.wait(pending, timeout=self.timeout)
        self._drop(redis_errors.ConnectionError("the connection was closed"))
        self._watchdog.cancel()

    async def _open(self) -> None:
        greeting: list[asyncio.Future[Any]] = []
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._connect()
                # Everything goes out at once, the greeting first: its replies come first.
                for packed in self._greeting():
                    greeting.append(asyncio.get_running_loop().create_future())
                    conn.write(packed, greeting[-1], now=False)
                queued, self._queued = self._queued, []
                for packed, future in queued:
                    conn.write(packed, future, now=False)
                conn.flush()
                self._conn = conn
                self._opening = None
                for future in greeting:
                    await future
            self.connects += 1
        except BaseException as exc:
            error = _connection_error(exc)
            self._drop(error)
            queued, self._queued = self._queued, []
            for _, future in queued:
                if not future.done():
                    future.set_exception(error)
            for future in greeting:
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: the error is the one raised here
            if not isinstance(exc, Exception):
                raise
        finally:
            self._opening = None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        kw = self._kwargs
        conn: _Connection
        if self._unix:
            _, conn = await loop.create_unix_connection(lambda: _Connection(self), kw["path"])
        else:
            host, port = kw.get("host", "localhost"), int(kw.get("port", 6379))
            context = _tls_context(kw) if self._tls else None
            _, conn = await loop.create_connection(
                lambda: _Connection(self), host, port, ssl=context
            )
        return conn

    def _greeting(self) -> list[bytes]:
        kw = self._kwargs
        commands: list[tuple[Arg, ...]] = []
        if kw.get("password"):
            user = kw.get("username")
            commands.append(("AUTH", user, kw["password"]) if user else ("AUTH", kw["password"]))
        if int(kw.get("db") or 0):
            commands.append(("SELECT", int(kw["db"])))
        commands += [("SCRIPT", "LOAD", script.source) for script in self._scripts]
        return [_pack(c) for c in commands]

    def _drop(self, error: Exception) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.fail(error)

    def _lost(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None


class Script:
    """A Lua script run by its SHA1: on a `PipedRedis` that loads it on every connection it
    opens (its `scripts`), or on a client; a server that lost its script cache (SCRIPT FLUSH)
    under an open connection is sent the source."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def run(self, client: Redis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            # redis-py types this command "awaitable or value" (shared with the sync client).
            await cast(Awaitable[Any], client.script_load(self.source))
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def send(self, pipe: PipedRedis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """The script sent on `pipe`: the future of its reply."""
        return pipe.send("EVALSHA", self.sha, len(keys), *keys, *args)

    async def call(self, pipe: PipedRedis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await pipe.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            return await pipe.call("EVAL", self.source, len(keys), *keys, *args)


def _pack(args: tuple[Arg, ...]) -> bytes:
    # hiredis's stub types the tuple as of one element; it takes any number.
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


def _connection_error(exc: BaseException) -> Exception:
    if isinstance(exc, redis_errors.RedisError):
        return exc
    if isinstance(exc, TimeoutError):
        return redis_errors.TimeoutError("connecting to Redis timed out")
    return redis_errors.ConnectionError(f"cannot connect to Redis: {exc}")


def _tls_context(kw: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cafile=kw.get("ssl_ca_certs"), cadata=kw.get("ssl_ca_data")
    )
    if kw.get("ssl_certfile"):
        context.load_cert_chain(kw["ssl_certfile"], kw.get("ssl_keyfile"), kw.get("ssl_password"))
    reqs = kw.get("ssl_cert_reqs", "required")
    if reqs in ("none", ssl.CERT_NONE) or not kw.get("ssl_check_hostname", True):
        context.check_hostname = False
    if reqs in ("none", ssl.CERT_NONE):
        context.verify_mode = ssl.CERT_NONE
    elif reqs in ("optional", ssl.CERT_OPTIONAL):
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
