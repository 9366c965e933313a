"""The engine client's own HTTP/1.1 (`backends/http_client.py`) against a raw socket server that
answers exactly what each test scripts: framing, keep-alive, broken responses, TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mindrouter.backends import http_client
from mindrouter.backends.base import Timeouts
from mindrouter.backends.http import Upstream
from mindrouter.errors import UpstreamTimeout, UpstreamUnavailable

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Each test on both loops: the gateway runs on uvloop, whose transports are not
    `asyncio.Transport` subclasses."""
    return uvloop.run if request.param == "uvloop" else asyncio.run


class RawServer:
    """Reads one request head and body per turn and lets `answer` write whatever it likes."""

    def __init__(self) -> None:
        self.answer: Answer = ok_json
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                await self.answer(head, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def ok_json(head: bytes, writer: asyncio.StreamWriter) -> None:
    body = b'{"ok": true}'
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()


@contextlib.asynccontextmanager
async def serving(answer: Answer = ok_json) -> AsyncIterator[RawServer]:
    server = RawServer()
    server.answer = answer
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield server


def upstream(url: str, **timeouts: float) -> Upstream:
    return Upstream(url, timeouts=Timeouts(**timeouts), backend="b")


def test_requests_reuse_one_connection_with_the_path_prefix_and_host(run: Run) -> None:
    async def scenario() -> None:
        async with serving() as raw:
            up = upstream(f"http://localhost:{raw.port}/engine/")
            for _ in range(3):
                assert await up.post_json("/v1/x", {"a": 1}, "m") == {"ok": True}
            await up.aclose()
        assert raw.connections == 1
        first = raw.requests[0]
        assert first.startswith(b"POST /engine/v1/x HTTP/1.1\r\n")
        assert f"Host: localhost:{raw.port}\r\n".encode() in first
        assert first.endswith(b'{"a":1}')

    run(scenario())


def test_a_connection_the_engine_closed_while_idle_is_not_reused(run: Run) -> None:
    async def close_after(head: bytes, writer: asyncio.StreamWriter) -> None:
        await ok_json(head, writer)
        writer.close()  # a keep-alive response, then the server's idle close

    async def scenario() -> None:
        async with serving(close_after) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            assert await up.post_json("/x", {}, "m") == {"ok": True}
            await asyncio.sleep(0.05)
            assert await up.post_json("/x", {}, "m") == {"ok": True}
            await up.aclose()
        assert raw.connections == 2

    run(scenario())


def test_a_body_ended_by_the_close_is_read_whole(run: Run) -> None:
    async def http10(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.0 200 OK\r\n\r\n{"old": ')
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b'"style"}')
        writer.close()

    async def scenario() -> None:
        async with serving(http10) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            assert await up.post_json("/x", {}, "m") == {"old": "style"}
            await up.aclose()

    run(scenario())


def test_a_large_chunked_body_arrives_intact(run: Run) -> None:
    doc = {"data": ["x" * 1000] * 5000}  # 5 MB: reading pauses and resumes on the way
    body = orjson.dumps(doc)

    async def chunked(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for at in range(0, len(body), 70_000):
            piece = body[at : at + 70_000]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def scenario() -> None:
        async with serving(chunked) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            assert await up.post_json("/x", {}, "m") == doc
            assert await up.post_json("/x", {}, "m") == doc
            await up.aclose()
        assert raw.connections == 1

    run(scenario())


@pytest.mark.parametrize(
    ("reply", "wording"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "malformed response"),
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n", "headers longer"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cut', "connection dropped"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed response"),
    ],
    ids=["not-http", "huge-head", "cut-body", "bad-chunk"],
)
def test_broken_responses_are_unavailable_backends(run: Run, reply: bytes, wording: str) -> None:
    async def broken(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        await writer.drain()
        writer.close()

    async def scenario() -> None:
        async with serving(broken) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            with pytest.raises(UpstreamUnavailable, match=wording):
                await up.post_json("/x", {}, "m")
            with pytest.raises(UpstreamUnavailable, match=wording):
                async with up.stream("/x", {}, "m") as s:
                    await s.next_sse_events()
            await up.aclose()

    run(scenario())


def test_a_stream_left_early_closes_its_connection(run: Run) -> None:
    async def scenario() -> None:
        gone = asyncio.Event()

        async def endless(head: bytes, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                while True:
                    writer.write(b"9\r\ndata: 1\n\n\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.005)
            except ConnectionError:
                gone.set()
                writer.close()

        async with serving(endless) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            async with up.stream("/x", {}, "m") as s:
                assert set(await s.next_sse_events()) == {b"1"}
                assert set(await s.next_sse_events()) == {b"1"}
            await asyncio.wait_for(gone.wait(), 5)
            await up.aclose()

    run(scenario())


def test_a_stream_read_to_its_end_returns_the_connection(run: Run) -> None:
    async def events(head: bytes, writer: asyncio.StreamWriter) -> None:
        body = b"data: 1\n\ndata: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async def scenario() -> None:
        async with serving(events) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            for _ in range(2):
                async with up.stream("/x", {}, "m") as s:
                    assert await s.next_sse_events() == [b"1", b"[DONE]"]
                    await s.finish()
            await up.aclose()
        assert raw.connections == 1

    run(scenario())


def test_no_first_byte_in_time(run: Run) -> None:
    async def silent(head: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with serving(silent) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}", first_byte=0.2)
            with pytest.raises(UpstreamTimeout, match="no first byte"):
                async with up.stream("/x", {}, "m"):
                    pass
            await up.aclose()

    run(scenario())


def _certificates(tmp: Path) -> tuple[Path, Path, Path]:
    """A certificate authority (its certificate) and a server certificate and key it signed
    for localhost and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)

    def cert(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: str,
        signer: ec.EllipticCurvePrivateKey,
        ca: bool,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca_path, cert_path, key_path = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    ca_path.write_bytes(
        cert("test CA", ca_key, "test CA", ca_key, True).public_bytes(serialization.Encoding.PEM)
    )
    cert_path.write_bytes(
        cert("localhost", server_key, "test CA", ca_key, False).public_bytes(
            serialization.Encoding.PEM
        )
    )
    key_path.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, cert_path, key_path


def test_https_is_verified_against_the_trust_store(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = _certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def scenario() -> None:
        server = RawServer()
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=context)
        port = listening.sockets[0].getsockname()[1]
        async with listening:
            # Not in the system's trust store: refused.
            http_client.tls_context.cache_clear()
            up = upstream(f"https://localhost:{port}")
            with pytest.raises(UpstreamUnavailable, match=r"cannot connect.*certificate"):
                await up.post_json("/x", {}, "m")
            # SSL_CERT_FILE names a trust store, as OpenSSL reads it.
            monkeypatch.setenv("SSL_CERT_FILE", str(ca))
            http_client.tls_context.cache_clear()
            up = upstream(f"https://localhost:{port}")
            assert await up.post_json("/x", {}, "m") == {"ok": True}
            assert await up.post_json("/x", {}, "m") == {"ok": True}
            await up.aclose()
        assert server.connections == 1  # both requests on one (the refused handshake never got one)

    run(scenario())
    http_client.tls_context.cache_clear()


SSE_SHAPES = (
    b": keep-alive\n\n"
    b"data: 1\n\n"
    b"data:2\r\n\r\n"  # CRLF line ends, no space after the colon
    b'event: x\nid: 7\ndata: {"a":\ndata: 1}\n\n'  # other fields; data over two lines
    b"\n\n"  # blank lines between events
    b"retry: 10\n\n"  # an event without data
    b"data: last"  # the body ends without the blank line
)
NDJSON_SHAPES = b'{"a": 1}\n\n{"b": 2}\r\n{"c": 3}'  # a blank line, CRLF, no newline at the end
FRAMINGS = {
    "sse": (SSE_SHAPES, [b"1", b"2", b'{"a":\n1}', b"last"]),
    "ndjson": (NDJSON_SHAPES, [b'{"a": 1}', b'{"b": 2}\r', b'{"c": 3}']),
}


def in_pieces(body: bytes, piece: int, pause: float) -> Answer:
    """A chunked response of `body`, `piece` bytes a write, with `pause` seconds between."""

    async def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for at in range(0, len(body), piece):
            part = body[at : at + piece]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            if piece < len(body):
                await asyncio.sleep(pause)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return answer


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("piece", [1, 3, 0], ids=["byte-by-byte", "3-bytes", "whole"])
@pytest.mark.parametrize("mode", ["pulled", "pushed", "handed-back"])
def test_events_and_lines_are_framed_however_the_bytes_arrive(
    run: Run, framing: str, piece: int, mode: str
) -> None:
    """Pulled, or the first batch pulled and the rest pushed from the connection's callback
    (`handed-back`: a handler that wants no more after each batch leaves the next to the
    pull): the same pieces, none lost or repeated."""
    body, expected = FRAMINGS[framing]
    piece = piece or len(body)
    pushed: list[list[bytes]] = []
    batches = 0

    def handle(batch: list[bytes]) -> bool:
        nonlocal batches
        batches += 1
        pushed.append(batch)
        return mode == "pushed"

    async def scenario() -> None:
        async with serving(in_pieces(body, piece, 0.001)) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            got: list[bytes] = []
            async with up.stream("/x", {}, "m") as s:
                read = s.next_sse_events if framing == "sse" else s.next_json_lines
                push = s.push_sse_events if framing == "sse" else s.push_json_lines
                while (batch := await read()) is not None:
                    assert batch, "a batch holds at least one event or line"
                    got += batch
                    if mode != "pulled":
                        pushed.clear()
                        await push(handle)
                        assert all(pushed), "a batch holds at least one event or line"
                        got += [p for b in pushed for p in b]
                await s.finish()
            await up.aclose()
        assert got == expected
        assert raw.connections == 1
        if mode != "pulled" and piece < len(body):
            assert batches, "nothing was pushed"

    run(scenario())


def test_a_pushed_stream_that_goes_silent_or_breaks_off_fails_when_pulled(run: Run) -> None:
    async def silent_then_cut(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):  # a sign of life every 50 ms: within the idle timeout
            writer.write(b"9\r\ndata: 1\n\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)
        if b"/silent" in head:
            await asyncio.sleep(5)
        writer.close()  # the body cut short

    async def scenario() -> None:
        async with serving(silent_then_cut) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}", idle=0.2)
            for path, error, wording in [
                ("/silent", UpstreamTimeout, "went silent for 0.2 s"),
                ("/cut", UpstreamUnavailable, "dropped"),
            ]:
                got: list[bytes] = []
                async with up.stream(path, {}, "m") as s:
                    got += await s.next_sse_events() or []
                    await s.push_sse_events(lambda batch: got.extend(batch) is None)
                    with pytest.raises(error, match=wording):
                        await s.next_sse_events()
                assert got == [b"1"] * 6
            await up.aclose()

    run(scenario())


def test_what_a_push_handler_raises_is_raised_by_the_push(run: Run) -> None:
    async def events(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"9\r\ndata: 2\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    def refuse(batch: list[bytes]) -> bool:
        raise UpstreamUnavailable(f"cannot take {batch}", "b")

    async def scenario() -> None:
        async with serving(events) as raw:
            up = upstream(f"http://127.0.0.1:{raw.port}")
            async with up.stream("/x", {}, "m") as s:
                assert await s.next_sse_events() == [b"1"]
                with pytest.raises(UpstreamUnavailable, match=r"cannot take \[b'2'\]"):
                    await s.push_sse_events(refuse)
            await up.aclose()

    run(scenario())
