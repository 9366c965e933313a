from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.gateway.stack import Stack, start_stack


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    s = start_stack()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="package")
def oai(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key=stack.key, max_retries=0)
