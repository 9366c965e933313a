"""A client that hangs up cancels its request, streamed or not.

Starlette notices a disconnect only while it streams a response; a handler awaiting a whole
answer would run to its end, holding its backend slot, with the engine generating for nobody.
This ASGI wrapper, once the request body has been read, waits on the server's `receive()` for
the `http.disconnect` message: it arrives as soon as the connection closes (or when the response
is complete, which is ignored). A disconnect before the response is complete cancels the task
the server runs the request in, and the wrapper takes that cancellation back once the
application has unwound; the pipeline meanwhile ends the request as `cancelled`, closes the
engine's stream (the engine sees it at once and stops) and charges what was generated. Nothing
polls.

The application still sees every message: reads after the body get the one the watcher took.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
        watch = _Watch(receive, send, task)
        try:
            await self.app(scope, watch.receive, watch.send)
        except asyncio.CancelledError:
            if not watch.hung_up or task.cancelling() > 1:
                raise  # cancelled from outside too (a shutdown), not by the watcher alone
        finally:
            watch.stop()
        if watch.hung_up:
            task.uncancel()  # the watcher's cancellation, taken by the application


class _Watch:
    def __init__(self, receive: Receive, send: Send, task: asyncio.Task[object]) -> None:
        self._receive = receive
        self._send = send
        self.task = task
        self.hung_up = False
        self._complete = False
        self._watcher: asyncio.Task[None] | None = None
        self._after_body: asyncio.Future[Message] | None = None

    async def receive(self) -> Message:
        if self._after_body is not None:
            # The watcher owns the server's receive now; every later read gets what it got.
            return await asyncio.shield(self._after_body)
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self._after_body = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.ensure_future(self._watch(self._after_body))
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete = True
        await self._send(message)

    async def _watch(self, after_body: asyncio.Future[Message]) -> None:
        message = await self._receive()
        after_body.set_result(message)
        if message["type"] == "http.disconnect" and not self._complete:
            self.hung_up = True
            self.task.cancel()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self._after_body is not None and not self._after_body.done():
            self._after_body.cancel()
