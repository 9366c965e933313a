"""A client that hangs up cancels its request, streamed or not.

Starlette notices a disconnect only while it streams a response; a handler awaiting a whole
answer would run to its end, holding its backend slot, with the engine generating for nobody.
This ASGI wrapper cancels the task the server runs the request in when the connection closes
after the request body has been read and before the response is complete, and takes that
cancellation back once the application has unwound; the pipeline meanwhile ends the request as
`cancelled`, closes the engine's stream (the engine sees it at once and stops) and charges what
was generated. Nothing polls.

The gateway's own HTTP protocol (`http/connections.py`) calls the wrapper back when it loses
the connection (`ON_HANG_UP`), which costs nothing until it happens. Under another server the
wrapper instead waits on the server's `receive()` for the `http.disconnect` message, in a task
of its own started once the body has been read: it arrives as soon as the connection closes
(or when the response is complete, which is ignored). The application still sees every
message then: reads after the body get the one the watcher took.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.http.connections import ON_HANG_UP, RESPONSE_CYCLE

# The `send` this wrapper was given, kept in the request's scope. A stream's body chunks between
# its start and its end are sent there directly (`EventStream`): none of the layers in between
# looks at them (the edge and Starlette's exception handling look at a response's start, the
# watch below at its end), and each layer is a coroutine call per chunk.
SERVER_SEND = "mindrouter.server_send"


class CancelOnDisconnect:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[SERVER_SEND] = send
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(receive, send, task, called_back=RESPONSE_CYCLE in scope)
        if watch.called_back:
            scope[ON_HANG_UP] = watch.hang_up
        try:
            await self.app(scope, watch.receive, watch.send)
        except asyncio.CancelledError:
            if not watch.hung_up or task.cancelling() > 1:
                raise  # cancelled from outside too (a shutdown), not by the watcher alone
        finally:
            watch.stop()
            # Both entries lead back to the server's response cycle (its `send`; the watch holds
            # its `receive`), which holds the scope: left in place, every request's objects would
            # form a loop only the collector frees, and a stream's, alive through several of its
            # passes, would wait for a full one (a pause of tens of milliseconds under load).
            del scope[SERVER_SEND]
            scope.pop(ON_HANG_UP, None)
        if watch.hung_up:
            task.uncancel()  # the watcher's cancellation, taken by the application


class _Watch:
    def __init__(
        self, receive: Receive, send: Send, task: asyncio.Task[object], *, called_back: bool
    ) -> None:
        self._receive = receive
        self._send = send
        self.task = task
        self.called_back = called_back  # the server calls `hang_up`: no watcher task
        self.hung_up = False
        self._body_read = False
        self._complete = False
        self._watcher: asyncio.Task[None] | None = None
        self._after_body: asyncio.Future[Message] | None = None

    async def receive(self) -> Message:
        if self._after_body is not None:
            # The watcher owns the server's receive now; every later read gets what it got.
            return await asyncio.shield(self._after_body)
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self._body_read = True
            if not self.called_back:
                self._after_body = asyncio.get_running_loop().create_future()
                self._watcher = asyncio.ensure_future(self._watch(self._after_body))
        return message

    def hang_up(self) -> None:
        """The connection is gone: the request is cancelled if its body was read and its
        response is not complete (a body cut short reaches the application as a disconnect)."""
        if self._body_read and not self._complete and not self.hung_up:
            self.hung_up = True
            self.task.cancel()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete = True
        await self._send(message)

    async def _watch(self, after_body: asyncio.Future[Message]) -> None:
        message = await self._receive()
        after_body.set_result(message)
        if message["type"] == "http.disconnect":
            self.hang_up()

    def stop(self) -> None:
        """The application has returned: a hang-up from now on cancels nothing."""
        self._complete = True
        if self._watcher is not None:
            self._watcher.cancel()
        if self._after_body is not None and not self._after_body.done():
            self._after_body.cancel()
