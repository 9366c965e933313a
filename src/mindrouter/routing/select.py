"""Pick a backend for a request: healthy, serving the model, with room; best score first."""

from __future__ import annotations

from mindrouter.routing.catalog import BackendState


def rank_backends(
    candidates: list[tuple[BackendState, str]], exclude: set[str] | frozenset[str] = frozenset()
) -> list[tuple[BackendState, str]]:
    """Healthy candidates, those with free capacity first, then by priority and utilisation."""
    usable = [(b, up) for b, up in candidates if b.healthy and b.name not in exclude]

    def key(item: tuple[BackendState, str]) -> tuple[bool, int, float, str]:
        b = item[0]
        full = b.in_flight >= b.max_concurrent
        return (full, -b.priority, b.in_flight / b.max_concurrent, b.name)

    return sorted(usable, key=key)
