"""One simulator per engine for the whole session, with its settings restored after every test.

Starting and stopping uvicorn costs about 0.1 s, so servers are shared; a test that changes the
configuration gets it back as it was when the test ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from mindrouter.sim import SimConfig

from .support import Sim, models_for, start_sim


@pytest.fixture(scope="session")
def _shared() -> Iterator[Callable[[str], Sim]]:
    started: dict[str, Sim] = {}

    def get(engine: str) -> Sim:
        if engine not in started:
            config = SimConfig(engine=engine, models=models_for(engine))  # type: ignore[arg-type]
            started[engine] = start_sim(config)
        return started[engine]

    yield get
    for sim in started.values():
        sim.close()


@pytest.fixture
def sim_for(_shared: Callable[[str], Sim]) -> Iterator[Callable[..., Sim]]:
    """`sim_for("vllm", tokens_per_second=50)`: the shared server with settings changed for this
    test only."""
    restore: list[tuple[Sim, SimConfig]] = []

    def get(engine: str, **changes: object) -> Sim:
        sim = _shared(engine)
        restore.append((sim, dataclasses.replace(sim.state.config)))
        for key, value in changes.items():
            setattr(sim.state.config, key, value)
        return sim

    yield get
    for sim, config in reversed(restore):
        sim.state.config = config
        sim.state.healthy = True


@pytest.fixture
def vllm(sim_for: Callable[..., Sim]) -> Sim:
    return sim_for("vllm")


@pytest.fixture
def llamacpp(sim_for: Callable[..., Sim]) -> Sim:
    return sim_for("llamacpp")


@pytest.fixture
def ollama_sim(sim_for: Callable[..., Sim]) -> Sim:
    return sim_for("ollama")


@pytest.fixture(params=["vllm", "llamacpp"])
def oai(request: pytest.FixtureRequest, sim_for: Callable[..., Sim]) -> Sim:
    """Run the test against both OpenAI-compatible engines."""
    return sim_for(request.param)


@pytest.fixture(params=["vllm", "llamacpp", "ollama"])
def any_engine(request: pytest.FixtureRequest, sim_for: Callable[..., Sim]) -> Sim:
    return sim_for(request.param)
