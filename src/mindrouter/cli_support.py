"""What every administration command shares: running an action against the stores with the
configuration's database, the exit codes (2 for a bad configuration, 1 for anything else),
plain-text tables, and the argparse pieces for nouns, verbs and partial updates."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mindrouter.errors import MindRouterError
from mindrouter.settings import ConfigError, load_settings
from mindrouter.stores.sql import (
    DatabaseNotMigrated,
    DatabaseUnavailable,
    MigrationFailed,
    SqlStores,
    open_stores,
)

Action = Callable[[SqlStores, argparse.Namespace], Awaitable[None]]
if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def fail(message: str, code: int = 1) -> int:
    print(f"mindrouter: {message}", file=sys.stderr)
    return code


def config_error(exc: ConfigError) -> int:
    print(exc.report("mindrouter: configuration error: "), file=sys.stderr)
    return 2


def run_command(action: Action, *, migrating: bool = False) -> Callable[[argparse.Namespace], int]:
    def run(ns: argparse.Namespace) -> int:
        try:
            settings = load_settings(ns.config)
        except ConfigError as exc:
            return config_error(exc)
        return asyncio.run(execute_action(settings.database_url, ns, action, migrating))

    return run


async def execute_action(url: str, ns: argparse.Namespace, action: Action, migrating: bool) -> int:
    stores = open_stores(url)
    try:
        if not migrating:
            await stores.ensure_migrated(ns.config)
        await action(stores, ns)
    except (DatabaseNotMigrated, DatabaseUnavailable, MigrationFailed) as exc:
        return fail(str(exc))
    except ConfigError as exc:
        return config_error(exc)
    except MindRouterError as exc:
        return fail(exc.message)
    finally:
        await stores.aclose()
    return 0


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[as_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def as_cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def given_options(ns: argparse.Namespace, fields: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line: the others default to SUPPRESS, i.e. absent."""
    return {f: getattr(ns, f) for f in fields if hasattr(ns, f)}


def with_config(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--config", required=True, metavar="FILE", help="YAML configuration")
    return parser


def add_switch(parser: argparse.ArgumentParser, dest: str, on: str, off: str) -> None:
    both = parser.add_mutually_exclusive_group()
    both.add_argument(on, dest=dest, action="store_const", const=True)
    both.add_argument(off, dest=dest, action="store_const", const=False)


def noun_verbs(sub: Subparsers, noun: str, help_text: str) -> Subparsers:
    parser = sub.add_parser(noun, help=help_text)
    return parser.add_subparsers(dest=f"{noun}_verb", required=True, metavar="VERB")


def add_verb(
    verbs: Subparsers, verb: str, action: Action, help_text: str, *, partial: bool = False
) -> argparse.ArgumentParser:
    """A verb's parser; `partial` (updates): options not given are absent from the namespace."""
    default = argparse.SUPPRESS if partial else None
    parser = with_config(verbs.add_parser(verb, help=help_text, argument_default=default))
    parser.set_defaults(run=run_command(action))
    return parser
