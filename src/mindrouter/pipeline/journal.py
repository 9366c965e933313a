"""What each request in flight has produced, kept where it outlives a killed process.

The heartbeat's checkpoint (`recovery.py`) reaches the database every `heartbeat_s`; what a
process relays after it would be lost with the process. So each request in flight also has a
slot in a small memory-mapped file, rewritten at every output chunk (a store into shared memory,
no system call): the kernel keeps the file's pages when the process dies, even by SIGKILL. The
process holds an exclusive `flock` on its file for as long as it lives, and the kernel releases
it at the death: a file whose lock can be taken belongs to a dead process.

The next gateway process to start on the same machine with the same database (the same pod
after a container restart, the same host under a process supervisor) finds such files at start
(`orphans`), writes their counts into the dead process's pending records as a last checkpoint
and closes them at once; the file is removed then. Where no process restarts there, another
replica's sweeper closes the records with the heartbeat's checkpoint, as before.

A slot: the audit record's id (16 bytes) and the input and output tokens so far (4 bytes each).
A finished request's slot keeps its counts until it is taken again, last of the free ones:
its outcome reaches the database up to a batch later (`AuditWriter`), and a successor's
checkpoint only touches records still `pending`, so the counts of a request that ended just
before the kill still count and those of one whose outcome was written change nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
import struct
import tempfile
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mindrouter.observability.logging import log
from mindrouter.stores.records import Checkpoint

_SLOT = struct.Struct("<16sII")
_COUNTS = struct.Struct("<II")
_EMPTY = bytes(16)
_SUFFIX = ".journal"
_MAX_COUNT = 2**32 - 1


def journal_dir(database_url: str, configured: str | None) -> Path:
    """The directory of this deployment's journals: `configured`, else one in shared memory (or
    the temporary directory) named for the database, so that gateways of other deployments on
    the machine never take each other's files."""
    if configured:
        return Path(configured)
    base = Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(tempfile.gettempdir())
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return base / f"mindrouter-{os.getuid()}" / digest


class Journal:
    def __init__(self, directory: Path, instance_id: str, slots: int = 4096) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = directory / f"{instance_id}{_SUFFIX}"
        # Locked under another name first: a file that `orphans` can see is always locked
        # while its process lives.
        starting = directory / f".{instance_id}.new"
        self._fd = os.open(starting, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(self._fd, slots * _SLOT.size)  # sparse: pages appear as slots are used
        os.rename(starting, self.path)
        self._map = mmap.mmap(self._fd, slots * _SLOT.size)
        self._free = deque(range(slots))

    def take(self, audit_uuid: str) -> int | None:
        """A slot for a request (None when all are taken: it is checkpointed by the heartbeat
        alone)."""
        if not self._free:
            return None
        slot = self._free.popleft()
        _SLOT.pack_into(self._map, slot * _SLOT.size, uuid.UUID(audit_uuid).bytes, 0, 0)
        return slot

    def note(self, slot: int, input_tokens: int, output_tokens: int) -> None:
        # Once per output chunk: a conditional expression costs a third of a `min()` call.
        _COUNTS.pack_into(
            self._map,
            slot * _SLOT.size + 16,
            input_tokens if input_tokens < _MAX_COUNT else _MAX_COUNT,
            output_tokens if output_tokens < _MAX_COUNT else _MAX_COUNT,
        )

    def give(self, slot: int) -> None:
        self._free.append(slot)

    def remove(self) -> None:
        """At a clean stop, when every record has been completed."""
        self._map.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)


@dataclass(frozen=True, slots=True)
class Orphan:
    """The journal of a dead process: its instance and the counts of its requests in flight."""

    instance_id: str
    points: list[Checkpoint]
    path: Path
    fd: int  # holds the dead owner's lock, so that one process alone recovers it

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)


def _read(fd: int) -> list[Checkpoint]:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    points = []
    for at in range(0, size - _SLOT.size + 1, _SLOT.size):
        raw, input_tokens, output_tokens = _SLOT.unpack_from(data, at)
        if raw != _EMPTY and (input_tokens or output_tokens):
            points.append(Checkpoint(str(uuid.UUID(bytes=raw)), input_tokens, output_tokens))
    return points


def orphans(directory: Path) -> Iterator[Orphan]:
    """The journals in `directory` whose processes have died (their lock is free)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(f"*{_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue  # taken by another process meanwhile, or not ours to read
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # its process is alive
            continue
        if not path.exists():
            os.close(fd)  # recovered and removed by another process just before
            continue
        try:
            points = _read(fd)
        except (OSError, ValueError) as exc:
            log.warning("an unreadable journal was removed", path=str(path), error=str(exc))
            Orphan("", [], path, fd).remove()
            continue
        yield Orphan(path.name.removesuffix(_SUFFIX), points, path, fd)
