"""`python -m bench.overhead [--short]`: see bench/overhead/__init__.py and docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench.overhead.run import main, rerender


def cli() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead",
        description="Gateway overhead: MindRouter bare and governed beside LiteLLM, one core each.",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help="about a minute: fewer rates, one round, no soak; reports figures, never fails",
    )
    parser.add_argument(
        "--rerender",
        metavar="FILE",
        help="re-derive the figures and the Markdown report of a results JSON; run nothing",
    )
    ns = parser.parse_args()
    if ns.rerender:
        return rerender(Path(ns.rerender))
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main(ns.short))
    return uvloop.run(main(ns.short))


if __name__ == "__main__":
    sys.exit(cli())
