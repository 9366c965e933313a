"""The journal of requests in flight: slots rewritten in place, a live process's file never
taken, a dead one's read back once."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from mindrouter.pipeline.journal import Journal, _read, journal_dir, orphans
from mindrouter.pipeline.recovery import Recovery
from mindrouter.stores.limits.memory import MemoryLimitStore
from mindrouter.stores.records import Checkpoint, SweepResult

_CHILD = """
import os, sys, time
from pathlib import Path
from mindrouter.pipeline.journal import Journal
j = Journal(Path(sys.argv[1]), "dead")
slot = j.take(sys.argv[2])
j.note(slot, 12, 1)
j.note(slot, 12, 7)
done = j.take("00000000-0000-0000-0000-000000000001")
j.note(done, 3, 2)
j.give(done)
j.take("00000000-0000-0000-0000-000000000002")  # nothing produced yet
print("ready", flush=True)
time.sleep(60)
"""


def test_a_live_journal_is_never_an_orphan(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "alive")
    slot = journal.take(str(uuid.uuid4()))
    assert slot is not None
    journal.note(slot, 5, 3)
    assert list(orphans(tmp_path)) == []
    journal.remove()
    assert not journal.path.exists()


def test_a_killed_processs_counts_are_read_back_once(tmp_path: Path) -> None:
    request = str(uuid.uuid4())
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), request], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    assert list(orphans(tmp_path)) == []  # locked while it lives
    child.kill()
    child.wait()
    (found,) = orphans(tmp_path)
    # The last note of each request (a finished one's record is no longer pending, so its
    # checkpoint changes nothing); a request that had produced nothing is not there.
    assert found.instance_id == "dead"
    assert found.points == [
        Checkpoint(request, 12, 7),
        Checkpoint("00000000-0000-0000-0000-000000000001", 3, 2),
    ]
    assert list(orphans(tmp_path)) == []  # held by the first reader
    found.remove()
    assert list(tmp_path.iterdir()) == []


def test_counts_past_the_slot_width_are_kept_at_its_largest(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "large")
    request = str(uuid.uuid4())
    slot = journal.take(request)
    assert slot is not None
    journal.note(slot, 2**40, 2**32)
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        assert _read(fd) == [Checkpoint(request, 2**32 - 1, 2**32 - 1)]
    finally:
        os.close(fd)
    journal.remove()


def test_slots_are_reused_and_run_out_quietly(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "small", slots=2)
    first, second = journal.take(str(uuid.uuid4())), journal.take(str(uuid.uuid4()))
    assert (first, second) == (0, 1)
    assert journal.take(str(uuid.uuid4())) is None  # checkpointed by the heartbeat alone
    journal.give(1)
    journal.give(0)
    assert journal.take(str(uuid.uuid4())) == 1  # the longest free first
    journal.remove()


def test_each_database_has_its_own_folder(tmp_path: Path) -> None:
    one = journal_dir("sqlite+aiosqlite:///a.db", None)
    assert one != journal_dir("sqlite+aiosqlite:///b.db", None)
    assert f"mindrouter-{os.getuid()}" in str(one)
    assert journal_dir("x", str(tmp_path)) == tmp_path


class _Ledger:
    """The instance ledger's calls, answered with nothing (the database is not the point)."""

    async def register(self, *args: object) -> None:
        pass

    async def heartbeat(self, *args: object) -> None:
        pass

    async def checkpoint(self, *args: object) -> None:
        pass

    async def retire(self, *args: object) -> None:
        pass

    async def sweep(self, *args: object) -> SweepResult:
        return SweepResult([], 0, [])


async def test_a_gateway_without_a_usable_journal_folder_still_starts(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    recovery = Recovery(_Ledger(), MemoryLimitStore(), stale_s=15, journal_dir=blocked / "j")
    await recovery.start()
    assert recovery.journal is None
    assert recovery.track(str(uuid.uuid4()), lambda: None) is None
    await recovery.tick()
    await recovery.stop()
