"""How every process divides a backend's free slots, and orders the deployment's best waiters.

Pure: each process computes the same answer from the same published views, which is what keeps
two processes from filling one free slot at the same moment.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from mindrouter.scheduling import Standing

Order = tuple[int, float, str]


def order(standing: Standing, process: str) -> Order:
    """The order in which the deployment's best waiters are served: the fair queue's rank, ties
    to the process with the smaller id, so that every process agrees on one."""
    return (standing.tier, standing.score, process)


def turns(
    views: Mapping[str, Mapping[str, Standing]], models: Collection[str]
) -> tuple[list[str], list[str]]:
    """The order in which processes get a backend's free slots: those with requests waiting for
    one of its `models`, best waiter first (empty if nobody waits); and every process by id.
    `views` is process id -> its best waiter per model."""
    firsts: dict[str, Order] = {}
    for process, best in views.items():
        keys = [order(best[m], process) for m in models if m in best]
        if keys:
            firsts[process] = min(keys)
    return sorted(firsts, key=firsts.__getitem__), sorted(views)


def part(free: int, turn: Sequence[str], process: str) -> int:
    """`process`'s part of `free` slots handed out one each in turn (0 if it has no turn)."""
    if process not in turn:
        return 0
    return free // len(turn) + (1 if turn.index(process) < free % len(turn) else 0)


def best_by_model(
    views: Mapping[str, Mapping[str, Standing]],
) -> dict[str, tuple[Standing, str]]:
    """model -> the first of the processes' best waiters for it, and whose it is."""
    out: dict[str, tuple[Standing, str]] = {}
    for process, best in views.items():
        for model, standing in best.items():
            held = out.get(model)
            if held is None or order(standing, process) < order(*held):
                out[model] = (standing, process)
    return out
