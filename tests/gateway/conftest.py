from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from tests.gateway.stack import Stack, start_stack
from tests.gateway.test_resilience import Cluster, start_cluster


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


@pytest.fixture
def cluster_factory() -> Iterator[Callable[..., Cluster]]:
    """`start_cluster`, with every cluster it made closed after the test."""
    made: list[Cluster] = []

    def make(*args: Any, **kwargs: Any) -> Cluster:
        made.append(start_cluster(*args, **kwargs))
        return made[-1]

    try:
        yield make
    finally:
        for c in made:
            c.close()
