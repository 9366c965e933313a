"""Free TCP ports on the loopback for servers a benchmark or a test starts."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago.

    Every socket stays bound until all are picked: the kernel can hand out a port again as
    soon as the socket that held it closes, so ports taken one at a time may coincide.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]
