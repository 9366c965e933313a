"""The in-loop server's main loop: asleep between once-a-second ticks, woken at once when it is
asked to exit (from any thread), instead of looking ten times a second."""

from __future__ import annotations

import asyncio
import threading

from starlette.applications import Starlette

from mindrouter.serving import InLoopServer


async def test_asking_to_exit_from_another_thread_wakes_the_main_loop() -> None:
    server = InLoopServer(Starlette())
    await server.start()
    inner = server._server
    for _ in range(1000):  # bounded: the main loop starts its first pause right after startup
        if inner._exit_waiter is not None:
            break
        await asyncio.sleep(0.001)
    waiter = inner._exit_waiter
    assert waiter is not None and not waiter.done()
    asker = threading.Thread(target=setattr, args=(inner, "should_exit", True))
    asker.start()
    asker.join()
    for _ in range(3):
        await asyncio.sleep(0)  # the wake-up the other thread queued runs on the next turn
    assert waiter.done()
    await server.stop()
