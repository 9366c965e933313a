"""Slow, guessing and disconnecting clients, and proxies that are not ours: one gateway with small
limits, and clients on their own loopback addresses (Linux routes all of 127.0.0.0/8 to the
loopback interface), so that each test's address-keyed counters are its own.

- failed key attempts are rate-limited per address and per key prefix; a key the gateway has
  verified before is never held up;
- a client address may hold `max_connections_per_client` connections, no more;
- a body that stops arriving gets 408 after `body_timeout_s`; a short slow-loris attack (many
  connections trickling their heads) is cut off while others are served;
- `X-Forwarded-For` is believed only from a peer inside a `trusted_proxies` CIDR range;
- a 500 says `Connection: close`, and the client's next request on its keep-alive connection
  pool works;
- an upload the client aborts is logged as the client leaving, not as an unhandled error (on
  an inference route and on the admin API).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
import structlog
from starlette.requests import Request
from starlette.responses import Response

from tests.gateway.test_resilience import (
    Cluster,
    backend,
    request_body,
    start_cluster,
    vllm_sim,
    wait_for,
)

FAILURES_PER_MINUTE = 3
MAX_CONNECTIONS = 4
BODY_TIMEOUT = 0.5
HEADER_TIMEOUT = 1.0
PROXY = "127.0.0.100"  # inside the trusted range below
BODY = request_body("openai", False)


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    cluster = start_cluster(
        [backend("one", vllm_sim())],
        auth_failures_per_minute=FAILURES_PER_MINUTE,
        max_connections_per_client=MAX_CONNECTIONS,
        body_timeout_s=BODY_TIMEOUT,
        header_timeout_s=HEADER_TIMEOUT,
        trusted_proxies=["127.0.0.64/26"],
    )

    async def boom(request: Request) -> Response:
        raise RuntimeError("a bug")

    cluster.app.add_route("/v1/boom", boom, methods=["GET"])
    cluster.app.state.admin_api.router.add_route("/admin/boom", boom, methods=["GET"])
    try:
        yield cluster
    finally:
        cluster.close()


def client_from(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def wrong_key(like: str, n: int) -> str:
    """A well-formed key that is not `like` but shares its prefix (`mr2_` + 8 characters)."""
    return like[:12] + f"{n:043d}"


def other_prefix(n: int) -> str:
    return f"mr2_{n:08d}" + "z" * 35


def chat(client: httpx.Client, c: Cluster, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    return client.post(c.url + "/v1/chat/completions", json=BODY, headers=headers).status_code


def test_failed_keys_are_limited_per_address_but_a_verified_key_is_not(c: Cluster) -> None:
    with client_from("127.0.0.2") as client:
        assert chat(client, c, c.key) == 200  # verified once, before the guessing
        statuses = [chat(client, c, other_prefix(i)) for i in range(FAILURES_PER_MINUTE + 2)]
        assert statuses == [401] * FAILURES_PER_MINUTE + [429, 429]
        r = client.post(
            c.url + "/v1/chat/completions",
            json=BODY,
            headers={"Authorization": f"Bearer {other_prefix(99)}"},
        )
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert chat(client, c, c.key) == 200
    with client_from("127.0.0.3") as client:
        # Another address is not held up by the first one's failures.
        assert chat(client, c, other_prefix(100)) == 401


def test_failed_keys_are_limited_per_prefix_across_addresses(c: Cluster) -> None:
    with client_from("127.0.0.4") as owner:
        assert chat(owner, c, c.key) == 200
    for i in range(FAILURES_PER_MINUTE):
        with client_from(f"127.0.0.{10 + i}") as guesser:
            assert chat(guesser, c, wrong_key(c.key, i)) == 401
    with client_from("127.0.0.20") as guesser:
        assert chat(guesser, c, wrong_key(c.key, 50)) == 429
        # The prefix is held, its verified key is not, even from the guessing address.
        assert chat(guesser, c, c.key) == 200


def _connect(address: str, c: Cluster) -> socket.socket:
    url = urlsplit(c.url)
    s = socket.create_connection((url.hostname, url.port), source_address=(address, 0))
    s.settimeout(30)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


def test_one_address_may_hold_only_so_many_connections(c: Cluster) -> None:
    held = [_connect("127.0.0.5", c) for _ in range(MAX_CONNECTIONS)]
    try:
        extra = _connect("127.0.0.5", c)
        answer = extra.recv(4096)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"too many open connections" in answer
        with client_from("127.0.0.6") as other:
            assert other.get(c.url + "/healthz").status_code == 200
    finally:
        for s in held:
            s.close()
    # Closed connections are counted out again.
    with client_from("127.0.0.5") as client:
        wait_for(lambda: client.get(c.url + "/healthz").status_code == 200, "a free slot")


def test_a_body_that_stops_arriving_gets_408(c: Cluster) -> None:
    s = _connect("127.0.0.7", c)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {c.key}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    s.sendall(head.encode() + b'{"model": ')
    answer = _read_all(s)
    s.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in answer.lower()
    assert b"stopped arriving" in answer


def test_a_short_slow_loris_is_cut_off_while_others_are_served(c: Cluster) -> None:
    # Twelve connections from three addresses, each sending its head a byte at a time.
    sockets = [_connect(f"127.0.0.{30 + i % 3}", c) for i in range(12)]
    stop = threading.Event()
    answers: dict[int, bytes] = {}

    def trickle(i: int, s: socket.socket) -> None:
        try:
            for byte in b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                if stop.is_set():
                    return
                s.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:
            pass
        finally:
            try:
                answers[i] = s.recv(4096)
            except OSError:
                answers[i] = b""

    threads = [threading.Thread(target=trickle, args=p) for p in enumerate(sockets)]
    for t in threads:
        t.start()
    try:
        with client_from("127.0.0.40") as other:
            for _ in range(5):
                assert other.get(c.url + "/healthz").status_code == 200
        for t in threads:
            t.join(timeout=30)
    finally:
        stop.set()
        for s in sockets:
            s.close()
    assert all(answers[i].startswith(b"HTTP/1.1 408") for i in range(12)), answers


def _exchange(s: socket.socket, request: bytes) -> bytes:
    """One request on a kept-alive connection and its whole answer (a body with a length)."""
    s.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(
        next(h for h in head.lower().split(b"\r\n") if h.startswith(b"content-length"))[15:]
    )
    while len(body) < length:
        body += s.recv(4096)
    return head


def test_each_head_of_a_kept_alive_connection_has_the_whole_timeout(c: Cluster) -> None:
    """Requests that follow each other on one connection for longer than the header timeout
    are all served; and a head that starts late on it is given its own full timeout, counted
    from its first byte, not from an earlier head's."""
    s = _connect("127.0.0.41", c)
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2 * HEADER_TIMEOUT:
            assert _exchange(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
                b"HTTP/1.1 200"
            )
            time.sleep(0.05)
        time.sleep(HEADER_TIMEOUT * 0.6)  # between requests: nothing is timed
        began = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\n")  # and no more of this head
        answer = _read_all(s)
        waited = time.monotonic() - began
    finally:
        s.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert waited >= HEADER_TIMEOUT - 0.01


def _audited_ip(c: Cluster) -> str:
    row = c.audit(1)[-1]
    ip: str = row["client_ip"]
    return ip


def test_forwarded_for_is_believed_only_from_a_trusted_range(c: Cluster) -> None:
    forwarded = {"Authorization": f"Bearer {c.key}", "X-Forwarded-For": "6.6.6.6"}
    with client_from("127.0.0.1") as untrusted:
        r = untrusted.post(c.url + "/v1/chat/completions", json=BODY, headers=forwarded)
        assert r.status_code == 200
    assert _audited_ip(c) == "127.0.0.1"
    with client_from(PROXY) as proxy:
        r = proxy.post(c.url + "/v1/chat/completions", json=BODY, headers=forwarded)
        assert r.status_code == 200
    assert _audited_ip(c) == "6.6.6.6"


@pytest.mark.parametrize("path", ["/v1/boom", "/admin/boom"])
def test_a_500_closes_the_connection_and_the_next_request_works(c: Cluster, path: str) -> None:
    """Answered and logged once, whether an inference route or the admin API failed."""
    auth = {"Authorization": f"Bearer {c.key}"}
    with client_from("127.0.0.8") as client, structlog.testing.capture_logs() as logs:
        assert client.get(c.url + "/healthz").status_code == 200
        r = client.get(c.url + path, headers=auth)
        assert r.status_code == 500
        assert r.headers["connection"] == "close"
        assert r.json()["error"]["type"] == "server_error"
        after = client.post(c.url + "/v1/chat/completions", json=BODY, headers=auth)
        assert after.status_code == 200
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["unhandled error"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/admin/keys"])
def test_an_aborted_upload_is_not_an_unhandled_error(
    c: Cluster, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.ERROR)
    with structlog.testing.capture_logs() as logs:
        s = _connect("127.0.0.9", c)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {c.key}\r\nContent-Length: 100000\r\n\r\n"
        )
        s.sendall(head.encode() + b"x" * 5000)
        s.close()
        wait_for(
            lambda: any(e["event"].startswith("client left") for e in logs),
            "the gateway to notice the client leaving",
        )
    assert not [e for e in logs if e["log_level"] in ("error", "critical")], logs
    assert not caplog.records, caplog.text
