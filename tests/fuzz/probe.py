"""Sends fuzzed requests and checks what every answer must be, whatever was sent.

- no 5xx, no connection reset, no hang: every request gets a whole answer within `TIMEOUT`
  on a keep-alive connection, so a server that drops the connection after a failure shows up
  on the next request too;
- a 4xx carries the error body of the route's dialect (OpenAI, Anthropic or Ollama);
- a 200 is whole: JSON parses, a stream ends with its dialect's end marker and carries no
  in-band error (with healthy engines an in-band error is a failure the client could not cause).

Every request is counted under its route template, per target, so a test can say how many it
sent and that every route was reached. `Volley` sends each request to every target at once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import httpx

if TYPE_CHECKING:
    from tests.fuzz.target import Target
    from tests.fuzz.wire import Auth

Dialect = Literal["openai", "anthropic", "ollama"]
# `json_body` left out: the request has no JSON body (None is sent as `null`).
NO_BODY: Any = object()
# No answer from simulated engines takes anywhere near this; reaching it is a hang.
TIMEOUT = httpx.Timeout(20.0)


def dialect_of(path: str) -> Dialect:
    if path.startswith(("/anthropic/", "/v1/messages")):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


class Probe:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.client = httpx.Client(base_url=target.url, timeout=TIMEOUT)
        self.sent: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        # Ids of stored Responses-API answers, for the tests that read them back.
        self.response_ids: list[str] = []

    def close(self) -> None:
        self.client.close()

    def send(
        self,
        method: str,
        path: str,
        *,
        route: str | None = None,
        content: bytes | None = None,
        json_body: Any = NO_BODY,
        headers: dict[str, str] | None = None,
        params: Any = None,
        dialect: Dialect | None = None,
    ) -> httpx.Response:
        """One request, checked; `route` is the template it is counted under (default: path)."""
        headers = dict(headers or {})
        if json_body is not NO_BODY:
            content = json.dumps(json_body).encode()
            headers.setdefault("content-type", "application/json")
        what = f"{method} {path}"
        try:
            response = self.client.request(
                method, path, content=content, headers=headers, params=params
            )
        except httpx.TimeoutException as exc:
            raise AssertionError(f"{what}: no answer within {TIMEOUT.read}s ({exc!r})") from None
        except httpx.TransportError as exc:
            raise AssertionError(f"{what}: connection failed: {exc!r}") from None
        self.sent[route or path] += 1
        self.statuses[response.status_code] += 1
        # The path the server saw: the client resolves dot segments before sending.
        check_answer(response, method, dialect or dialect_of(response.request.url.path), what)
        return response


class Volley:
    """One probe per target; `send` makes the same request to all of them at once (`path` may be
    a function of the target) and fails naming every target whose answer was wrong."""

    def __init__(self, targets: list[Target]) -> None:
        self.probes = [Probe(t) for t in targets]
        self._pool = ThreadPoolExecutor(len(targets))

    def close(self) -> None:
        self._pool.shutdown()
        for p in self.probes:
            p.close()

    def sent(self) -> int:
        return min(sum(p.sent.values()) for p in self.probes)

    def send(
        self,
        method: str,
        path: str | Callable[[Target], str],
        *,
        auth: Auth | None = None,
        **kwargs: Any,
    ) -> list[httpx.Response]:
        extra = kwargs.pop("headers", None) or {}

        def one(p: Probe) -> httpx.Response:
            headers = {**(auth.headers(p.target) if auth else {}), **extra}
            where = path if isinstance(path, str) else path(p.target)
            return p.send(method, where, headers=headers, **kwargs)

        futures = [self._pool.submit(one, p) for p in self.probes]
        failures = []
        for p, f in zip(self.probes, futures, strict=True):
            exc = f.exception()
            if isinstance(exc, AssertionError):
                failures.append(f"[{p.target.name}] {exc}")
            elif exc is not None:
                raise exc
        if failures:
            raise AssertionError("\n".join(failures))
        return [f.result() for f in futures]


def check_answer(response: httpx.Response, method: str, dialect: Dialect, what: str) -> None:
    status = response.status_code
    text = response.text[:600]
    assert status < 500, f"{what}: {status} {text}"
    if method == "HEAD" or status in (204, 304):
        return
    if status >= 400:
        check_error_shape(response, dialect, what)
    elif status == 200:
        check_whole(response, what)


def check_error_shape(response: httpx.Response, dialect: Dialect, what: str) -> None:
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        text = response.text[:300]
        raise AssertionError(f"{what}: {status} with a body that is not JSON: {text}") from None
    shapes = [dialect]
    if what.startswith("GET /v1/models"):
        # The model list answers Anthropic clients in their shape too.
        shapes.append("anthropic")
    shaped = any(_is_error(body, d) for d in shapes)
    assert shaped, f"{what}: {status} not a {dialect} error: {body}"


def _is_error(body: Any, dialect: Dialect) -> bool:
    if not isinstance(body, dict):
        return False
    error = body.get("error")
    if dialect == "ollama":
        return isinstance(error, str) and bool(error)
    if not isinstance(error, dict):
        return False
    message, kind = error.get("message"), error.get("type")
    if not (isinstance(message, str) and message and isinstance(kind, str) and kind):
        return False
    return body.get("type") == "error" if dialect == "anthropic" else True


def check_whole(response: httpx.Response, what: str) -> None:
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        response.json()
    elif kind == "text/event-stream":
        _check_sse(response.text, what)
    elif kind == "application/x-ndjson":
        _check_ndjson(response.text, what)


def _check_sse(text: str, what: str) -> None:
    events: list[tuple[str, Any]] = []
    name = ""
    for line in text.split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            payload = data if data == "[DONE]" else json.loads(data)
            events.append((name, payload))
            name = ""
    assert events, f"{what}: an empty stream"
    for name, payload in events:
        failed = name in ("error", "response.failed") or (
            isinstance(payload, dict)
            and (payload.get("type") in ("error", "response.failed") or "error" in payload)
        )
        assert not failed, f"{what}: in-band error {payload}"
    last_name, last = events[-1]
    ends = (
        last == "[DONE]"
        or last_name in ("message_stop", "response.completed", "response.incomplete")
        or (isinstance(last, dict) and last.get("type") in ("message_stop", "response.completed"))
    )
    assert ends, f"{what}: the stream ended without its end marker: {events[-3:]}"


def _check_ndjson(text: str, what: str) -> None:
    lines = [json.loads(line) for line in text.split("\n") if line.strip()]
    assert lines, f"{what}: an empty stream"
    assert not any("error" in line for line in lines), f"{what}: in-band error {lines[-1]}"
    assert lines[-1].get("done") is True, f"{what}: the stream ended without done: {lines[-1]}"
