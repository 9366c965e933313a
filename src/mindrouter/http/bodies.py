"""Request bodies: JSON decoded and checked, large ones in a child process.

orjson holds the interpreter lock for the whole of a parse: some 50–150 ms for a 30 MB body on
these machines. On a worker thread that still holds up the event loop, and with it every other
request, for as long; so bodies past `OFF_PROCESS_BYTES` are parsed in a child process (one,
started when the first such body arrives). What crosses between the processes is kept small,
since pickling 30 MB costs the lock as long as parsing it: the body goes through a file in
memory (`/dev/shm` where there is one; the kernel copies it, without the lock), and the decoded
value comes back with each long string that stands in the body as it is (no escapes: prompts,
base64 images) replaced by its place in the body, which this process then decodes straight from
the body it holds at the speed of a memory copy. Should the child die, the next large body
starts another; the body of the moment is decoded on a worker thread instead.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import IO, Any

import orjson

from mindrouter.errors import InvalidRequest

# Nesting deeper than this is refused at the edge. Later stages serialise the body again (the
# token estimate, the request to the backend) with orjson, whose limit is 254 levels; the
# canonical form and the backends' wire formats add a few levels of their own on the way.
MAX_JSON_DEPTH = 64
# Bodies larger than this are decoded off the event loop: on a worker thread up to
# OFF_PROCESS_BYTES, in the child process beyond.
OFF_LOOP_BYTES = 1024 * 1024
OFF_PROCESS_BYTES = 4 * 1024 * 1024


def _path(parts: list[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raises InvalidRequest naming the first place where `value` nests deeper than `limit`."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    parts = [*_flatten(where), key]
                    shown = _path(parts)
                    if len(shown) > 120:
                        shown = shown[:120] + "…"
                    raise InvalidRequest(
                        f"the request body nests deeper than {limit} levels (at {shown})",
                        param=str(parts[0]) if parts else None,
                    )
                stack.append((child, depth + 1, (where, key)))


def _flatten(where: tuple[Any, ...]) -> list[str | int]:
    # `where` is a linked list (parent, key), built without copying a path per container.
    keys: list[str | int] = []
    while where:
        where, key = where
        keys.append(key)
    keys.reverse()
    return keys


def decode_json(body: bytes) -> Any:
    if not body:
        raise InvalidRequest("the request body is empty; expected a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    if isinstance(value, dict | list):
        check_depth(value)
    return value


# Strings at least this long come back from the child as their place in the body.
_SLICED_CHARS = 65_536


@dataclass(frozen=True, slots=True)
class _Slice:
    """A string of the decoded value that is bytes [start:end) of the body, as they stand."""

    start: int
    end: int


def _sliced(value: Any, body: bytes) -> Any:
    if isinstance(value, str):
        if len(value) >= _SLICED_CHARS:
            raw = value.encode()
            at = body.find(raw)  # any place with these very bytes decodes to this string
            if at >= 0:
                return _Slice(at, at + len(raw))
        return value
    if isinstance(value, dict):
        return {k: _sliced(v, body) for k, v in value.items()}
    if isinstance(value, list):
        return [_sliced(v, body) for v in value]
    return value


def _unsliced(value: Any, body: bytes) -> Any:
    if isinstance(value, _Slice):
        return str(memoryview(body)[value.start : value.end], "utf-8")  # one pass, no copy first
    if isinstance(value, dict):
        return {k: _unsliced(v, body) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsliced(v, body) for v in value]
    return value


def decode_sliced(path: str) -> tuple[Any, str | None, str | None]:
    """What the child does with one body: (value with long strings sliced, None, None), or
    (None, message, param) for a body that is refused, as plain values."""
    with open(path, "rb") as f:
        body = f.read()
    try:
        return _sliced(decode_json(body), body), None, None
    except InvalidRequest as exc:
        return None, exc.message, exc.param


def _spill(body: bytes) -> str:
    """`body` in a file the child can read, in memory where the system has such a place."""
    fd, path = tempfile.mkstemp(prefix="mindrouter-body-", dir=_SPILL_DIR)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path


_SPILL_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


class ChildLost(Exception):
    """The child died or answered nonsense; the body is decoded here instead."""


class _Child:
    """One long-lived `python -m mindrouter.http.body_child`, started with the first large body.

    A process of its own rather than a multiprocessing pool: a pool's child imports the whole
    gateway again (the main module), seconds of CPU taken from the event loop on a small
    machine, where this one imports orjson and this module. It runs at the lowest scheduling
    priority, so that its parse yields the CPU to the requests the gateway is serving. Used from
    worker threads (its pipes block), one body at a time; gateways on several threads (tests)
    share it. It ends when its standard input closes, that is with this process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def decode(self, path: str) -> tuple[Any, str | None, str | None]:
        with self._lock:
            proc = self.proc
            if proc is None or proc.poll() is not None:
                proc = self.proc = subprocess.Popen(
                    [sys.executable, "-m", "mindrouter.http.body_child"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(path.encode() + b"\n")
                proc.stdin.flush()
                size = int.from_bytes(_read_exactly(proc.stdout, 8), "big")
                answer = pickle.loads(_read_exactly(proc.stdout, size))
            except (OSError, ValueError, pickle.UnpicklingError, ChildLost):
                proc.kill()
                self.proc = None
                raise ChildLost from None
            return answer  # type: ignore[no-any-return]


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise ChildLost
    return data


_child = _Child()


async def decode_body(body: bytes) -> Any:
    """The body decoded and checked (InvalidRequest if it is not JSON or nests too deep), off
    the event loop when it is large."""
    if len(body) <= OFF_LOOP_BYTES:
        return decode_json(body)
    if len(body) <= OFF_PROCESS_BYTES:
        return await asyncio.to_thread(decode_json, body)
    path = await asyncio.to_thread(_spill, body)
    try:
        value, message, param = await asyncio.to_thread(_child.decode, path)
    except ChildLost:
        return await asyncio.to_thread(decode_json, body)
    finally:
        os.unlink(path)
    if message is not None:
        raise InvalidRequest(message, param=param)
    return _unsliced(value, body)
