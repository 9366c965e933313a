"""The clients of the soak: workers sending chat requests in the three dialects, streamed and
not, for several users, through the proxy; every answer is logged for the ledger."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.harness import DIALECTS, PATHS, bearer, chat_body


@dataclass
class Sent:
    n: int
    user: str
    dialect: str
    stream: bool
    start: float  # wall clock
    end: float = 0.0
    status: int | None = None  # None: no answer (the connection broke first)
    request_id: str | None = None
    complete: bool = False  # the whole answer arrived, ended as its dialect ends it
    inband_error: str | None = None
    transport_error: str | None = None
    body: str = ""  # the start of an error answer
    chunks: int = 0  # the pieces of output text of a stream that reached the client


def _text_chunks(dialect: str, lines: list[str]) -> int:
    """How many pieces of output text the stream's lines carried (one per engine token here)."""
    n = 0
    for line in lines:
        if dialect == "ollama":
            data = line
        elif line.startswith("data: "):
            data = line[6:]
        else:
            continue  # event names, blank lines
        if not data or data == "[DONE]":
            continue
        try:
            item = json.loads(data)
        except ValueError:
            continue  # the line the connection broke in
        if dialect == "ollama":
            n += bool((item.get("message") or {}).get("content"))
        elif dialect == "openai":
            n += sum(bool((c.get("delta") or {}).get("content")) for c in item.get("choices", []))
        else:
            n += item.get("type") == "content_block_delta"
    return n


def _ended(dialect: str, lines: list[str]) -> tuple[bool, str | None]:
    """Whether a stream's lines end it properly, and an in-band error if one came."""
    error = None
    done = False
    for line in lines:
        if not line:
            continue
        if dialect == "ollama":
            item = json.loads(line)
            if "error" in item:
                error = str(item["error"])
            done = done or bool(item.get("done"))
        elif line.startswith("data: "):
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            item = json.loads(data)
            if "error" in item or item.get("type") == "error":
                error = json.dumps(item.get("error", item))[:200]
            if item.get("type") == "message_stop":
                done = True
    return done and error is None, error


@dataclass
class Load:
    url: str
    keys: dict[str, str]  # user -> key
    seed: int
    workers: int = 12
    log: list[Sent] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, seconds: float) -> None:
        rng = random.Random(self.seed)
        limits = httpx.Limits(max_keepalive_connections=0)  # one connection per request
        async with httpx.AsyncClient(base_url=self.url, timeout=90, limits=limits) as client:
            until = time.time() + seconds
            tasks = [
                asyncio.create_task(self._worker(client, random.Random(rng.random()), until))
                for _ in range(self.workers)
            ]
            await asyncio.gather(*tasks)

    async def _worker(self, client: httpx.AsyncClient, rng: random.Random, until: float) -> None:
        users = sorted(self.keys)
        while time.time() < until:
            user = rng.choice(users)
            dialect = rng.choice(DIALECTS)
            stream = rng.random() < 0.6
            max_tokens = rng.choice((8, 16, 32, 64, 120, 200))
            sent = Sent(len(self.log), user, dialect, stream, time.time())
            self.log.append(sent)
            body = chat_body(dialect, stream=stream, max_tokens=max_tokens, text=f"q{sent.n}")
            await self._send(client, sent, body)
            if sent.status == 429 or sent.status is None or (sent.status or 0) >= 500:
                await asyncio.sleep(0.2 + rng.random() * 0.3)

    async def _send(self, client: httpx.AsyncClient, sent: Sent, body: dict[str, Any]) -> None:
        headers = bearer(self.keys[sent.user])
        try:
            async with client.stream(
                "POST", PATHS[sent.dialect], json=body, headers=headers
            ) as response:
                sent.status = response.status_code
                sent.request_id = response.headers.get("x-request-id")
                if response.status_code != 200:
                    sent.body = (await response.aread()).decode(errors="replace")[:300]
                elif sent.stream:
                    lines: list[str] = []
                    try:
                        async for line in response.aiter_lines():
                            lines.append(line)
                    finally:  # also what came before the connection broke
                        sent.chunks = _text_chunks(sent.dialect, lines)
                    sent.complete, sent.inband_error = _ended(sent.dialect, lines)
                else:
                    json.loads(await response.aread())
                    sent.complete = True
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            sent.transport_error = f"{type(exc).__name__}: {exc}"[:200]
        sent.end = time.time()
