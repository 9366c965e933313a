"""Cost of Authenticator.authenticate() per call, warm cache, on an embedded SQLite database.

    .venv/bin/python -m bench.auth_cost [--calls N]

Prints microseconds per call for the request path (a key already verified in this process),
with plain-dict headers and with Starlette's Headers (what the routes pass), plus, for scale,
one cold call (indexed lookup + Argon2 with the production parameters) and one re-read after an
auth epoch change (lookup, no Argon2).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Mapping

from starlette.datastructures import Headers

from mindrouter.identity.authenticate import Authenticator
from mindrouter.stores.sql import open_stores
from mindrouter.stores.sql.migrate import upgrade


async def per_call_us(auth: Authenticator, headers: Mapping[str, str], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await auth.authenticate(headers)
    return (time.perf_counter() - started) / calls * 1e6


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = open_stores(f"sqlite+aiosqlite:///{tmp}/bench.db")
        await upgrade(stores.engine)
        await stores.directory.create_group("bench")
        await stores.directory.create_user("bench", "bench")
        key = (await stores.keys.create_key("bench")).key
        auth = Authenticator(stores.keys)
        await auth.start()
        try:
            plain = {"authorization": f"Bearer {key}", "content-type": "application/json"}
            started = time.perf_counter()
            await auth.authenticate(plain)
            cold_ms = (time.perf_counter() - started) * 1e3

            await per_call_us(auth, plain, 1000)  # warm-up
            plain_us = min([await per_call_us(auth, plain, calls) for _ in range(3)])
            starlette = Headers(
                raw=[
                    (b"host", b"gw"),
                    (b"content-type", b"application/json"),
                    (b"authorization", f"Bearer {key}".encode()),
                ]
            )
            starlette_us = min([await per_call_us(auth, starlette, calls) for _ in range(3)])

            await stores.directory.update_group("bench", {"rpm": 1})  # bumps the epoch
            await auth.poll()
            started = time.perf_counter()
            await auth.authenticate(plain)
            reread_ms = (time.perf_counter() - started) * 1e3
        finally:
            await auth.stop()
            await stores.aclose()
    print(f"warm cache, dict headers:      {plain_us:6.2f} µs/call ({calls} calls)")
    print(f"warm cache, Starlette Headers: {starlette_us:6.2f} µs/call")
    print(f"after an epoch change (query, no Argon2): {reread_ms:7.2f} ms, once per key")
    print(f"cold (query + Argon2, production params): {cold_ms:7.2f} ms, once per key")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().calls))
