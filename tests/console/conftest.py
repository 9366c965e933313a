from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.stack import ConsoleStack, start_console_stack


@pytest.fixture(scope="package")
def console() -> Iterator[ConsoleStack]:
    s = start_console_stack()
    s.add_account("root", admin=True)
    s.add_account("tester")
    try:
        yield s
    finally:
        s.close()
