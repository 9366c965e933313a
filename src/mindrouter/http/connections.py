"""Connection-level defences the ASGI server lacks: a deadline for the request head, a size cap
on it, and a cap on the connections one client address may hold open; and a way to write a
stream's chunks to the client from a callback (`DirectWriter`), and a test of whether a
request's body bytes are already here (`body_arrived`).

uvicorn closes idle keep-alive connections, but a connection that trickles its request line and
headers one byte at a time (slow-loris), or never sends anything at all, is kept forever, and
each one costs a socket and a little memory. These checks live in the HTTP protocol object,
below the application, because by the time the application sees a request its head is complete.
The body has its own idle timeout in the edge middleware (`http/edge.py`), where the
application's reads are visible.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from mindrouter.tasks import Alarm

# The server's response cycle of a request, in the request's scope (`direct_writer`).
RESPONSE_CYCLE = "mindrouter.response_cycle"
# A function the application may put in a request's scope; the protocol calls it when the
# client's connection is lost before the response is complete (`CancelOnDisconnect`). Its
# presence in a scope served here is what tells the application that the call will come.
ON_HANG_UP = "mindrouter.on_hang_up"


@dataclass(frozen=True, slots=True)
class ConnectionPolicy:
    # Seconds from the connection (or the first byte of the next request) to the end of its head.
    header_timeout_s: float = 15.0
    # Open connections per client address; 0 = no cap.
    max_per_address: int = 64
    # Bytes of request line and headers; past it the request gets 431.
    max_head_bytes: int = 64 * 1024
    # Peers the cap does not apply to (trusted reverse proxies carry many clients).
    exempt: Callable[[str], bool] = field(default=lambda _: False)


def _canned(status: bytes, message: bytes) -> bytes:
    body = b'{"error":{"message":"' + message + b'","type":"invalid_request_error"}}'
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
    )


TOO_MANY = _canned(
    b"503 Service Unavailable", b"too many open connections from this address; retry later"
)
HEAD_TIMEOUT = _canned(b"408 Request Timeout", b"the request headers did not arrive in time")
HEAD_TOO_LARGE = _canned(
    b"431 Request Header Fields Too Large", b"the request line and headers are too large"
)


def guarded_protocol(policy: ConnectionPolicy) -> type[HttpToolsProtocol]:
    """An httptools protocol class applying `policy`; one class per server, so that its count of
    connections per address covers exactly that server's connections."""

    class GuardedProtocol(_GuardedProtocol):
        _policy = policy
        _open_by_address: ClassVar[dict[str, int]] = {}

    return GuardedProtocol


class _GuardedProtocol(HttpToolsProtocol):
    _policy: ClassVar[ConnectionPolicy]
    _open_by_address: ClassVar[dict[str, int]]
    _counted: str | None = None
    _head_alarm: Alarm | None = None
    _head_since = 0.0  # when the head under way (or the last one) began
    _head_bytes = 0
    _in_head = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        policy, open_by_address = self._policy, self._open_by_address
        host = self.client[0] if self.client else None
        if host is not None and policy.max_per_address and not policy.exempt(host):
            if open_by_address.get(host, 0) >= policy.max_per_address:
                transport.write(TOO_MANY)
                transport.close()
                return
            open_by_address[host] = open_by_address.get(host, 0) + 1
            self._counted = host
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        if self._head_alarm is not None:
            self._head_alarm.cancel()
        host, self._counted = self._counted, None
        if host is not None:
            left = self._open_by_address.get(host, 1) - 1
            if left > 0:
                self._open_by_address[host] = left
            else:
                self._open_by_address.pop(host, None)
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and not cycle.response_complete:
            hang_up: Callable[[], None] | None = cycle.scope.get(ON_HANG_UP)  # type: ignore[assignment]
            if hang_up is not None:
                hang_up()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Counted only when the head is still incomplete after this read, so a body that
        # arrives in the same read as its head does not count towards the head's size.
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self._policy.max_head_bytes:
                self._refuse(HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # not an upgrade
            # Weakly: the cycle holds the scope, and a loop between them would leave both to
            # the collector's full passes instead of freeing them with the request.
            self.scope[RESPONSE_CYCLE] = weakref.ref(cycle)  # type: ignore[literal-required]

    def _start_head(self) -> None:
        if self._in_head:
            return
        self._in_head = True
        self._head_bytes = 0
        self._head_since = now = self.loop.time()
        if self._head_alarm is None:
            self._head_alarm = Alarm()
        self._head_alarm.arm(now + self._policy.header_timeout_s, self._head_due)

    def _head_due(self, now: float) -> float | None:
        """The head's deadline, one timer per connection rather than one per request: a head
        under way for the whole timeout is refused; one that started since is given the rest of
        its own time; between requests nothing is due (the next head arms the timer)."""
        if not self._in_head:
            return None
        due = self._head_since + self._policy.header_timeout_s
        if now < due:
            return due
        self._refuse(HEAD_TIMEOUT)
        return None

    def _end_head(self) -> None:
        self._in_head = False

    def _refuse(self, response: bytes) -> None:
        self._end_head()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()


class DirectWriter:
    """Writes body chunks of the response under way straight to the client's socket, as the
    server's own `send` would (one HTTP/1.1 chunk per call), but from a plain function that a
    callback can call: `send` is a coroutine. `write` answers whether the client still takes
    more at once (`ready`): not once the socket's buffer is above its high-water mark (the
    server's `send` then waits for it to drain), nor once the client has gone (nothing more is
    written then).

    It reads the server's response cycle (uvicorn's `RequestResponseCycle`: `transport`,
    `flow.write_paused`, `disconnected`, `response_started`, `response_complete`,
    `chunked_encoding`); `direct_writer` gives none when those are not there.
    """

    __slots__ = ("_cycle", "_flow", "_transport")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._flow = cycle.flow

    @property
    def ready(self) -> bool:
        return not (self._flow.write_paused or self._cycle.disconnected)

    def write(self, body: bytes) -> bool:
        if self._cycle.disconnected:
            return False
        self._transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return not self._flow.write_paused


def _cycle(scope: Mapping[str, Any]) -> RequestResponseCycle | None:
    """The server's response cycle of the request, while it lasts (`RESPONSE_CYCLE`)."""
    ref = scope.get(RESPONSE_CYCLE)
    return ref() if ref is not None else None


def direct_writer(scope: Mapping[str, Any]) -> DirectWriter | None:
    """A `DirectWriter` for the request's response; None when the request was not served by
    this module's protocol, its response is not a started chunked one, or the server's cycle
    lacks what the writer reads (another server version): chunks then go through `send`."""
    cycle = _cycle(scope)
    if cycle is None or not all(hasattr(cycle, name) for name in _CYCLE_FIELDS):
        return None
    if (
        not cycle.response_started
        or cycle.response_complete
        or cycle.chunked_encoding is not True
        or not hasattr(cycle.flow, "write_paused")
    ):
        return None
    return DirectWriter(cycle)


def body_arrived(scope: Mapping[str, Any]) -> Callable[[], bool] | None:
    """A test of whether the request's next `receive()` answers at once: the server holds body
    bytes, or the body's end, that the application has not taken yet (its cycle's message
    event is set, so `receive` does not wait). None when the request was not served by this
    module's protocol or the cycle has no such event (another server version)."""
    event = getattr(_cycle(scope), "message_event", None)
    return event.is_set if isinstance(event, asyncio.Event) else None


_CYCLE_FIELDS = (
    "transport",
    "flow",
    "disconnected",
    "response_started",
    "response_complete",
    "chunked_encoding",
)
