"""Typed readers for the mappings of the YAML configuration, collecting every mistake at once.

A `Section` wraps one mapping and where it sits (`backends[1]`); each read names the key it wants,
so a message names the exact spot (`backends[1].max_concurrent: must be at least 1, got 0`), and
the keys nobody asked for are the unknown ones, reported with the nearest known key. A read that
fails records its problem and answers the default, so parsing goes on and one run of
`mindrouter config check` lists everything wrong with a file. Strings are checked free of what
the database cannot store, integers against the column that will hold them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mindrouter.bounds import int_problem, text_problem
from mindrouter.settings_sources import read_secret_file

_TYPE_NAMES = {
    bool: "a boolean (true or false)",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


class ConfigError(Exception):
    """The configuration is invalid; `problems` says where and why, one line each."""

    def __init__(self, *problems: str) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(problems))

    def report(self, prefix: str) -> str:
        """One line per problem, each starting with `prefix`, for a terminal or a log."""
        return "\n".join(f"{prefix}{p}" for p in self.problems)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    for kind in (int, float, str, list, dict):
        if isinstance(value, kind):
            return _TYPE_NAMES[kind].split(" (")[0]
    return type(value).__name__


class Section:
    """One mapping of the file. Reads record the keys they know; `finish` reports the rest."""

    def __init__(self, data: dict[Any, Any], where: str, problems: list[str]) -> None:
        self.data = data
        self.where = where
        self.problems = problems
        self.known: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, message: str) -> None:
        self.problems.append(f"{self.path(key)}: {message}")

    def has(self, key: str) -> bool:
        self.known.add(key)
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        self.known.add(key)
        return self.data.get(key)

    def value(self, key: str, kind: type, default: Any) -> Any:
        """The value when it is of `kind` (an integer passes for a float), else the default."""
        value = self.raw(key)
        if value is None:
            return default
        if float is kind and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self.fail(key, f"expected {_TYPE_NAMES[kind]}, got {_describe(value)}")
            return default
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            self.fail(key, problem)
            return default
        return value

    def integer(self, key: str, default: int, span: tuple[int, int]) -> int:
        """An integer within `span` (what the database column holds, or tighter)."""
        if not self.has(key):
            return default
        value: int = self.value(key, int, default)
        if (problem := int_problem(value, *span)) is not None:
            self.fail(key, problem)
            return default
        return value

    def number(
        self,
        key: str,
        default: float,
        *,
        above: float | None = None,
        at_least: float | None = None,
        at_most: float | None = None,
    ) -> float:
        """A finite float within the bounds given: greater than `above`, at least `at_least`,
        at most `at_most`."""
        if not self.has(key):
            return default
        value: float = self.value(key, float, default)
        if not math.isfinite(value):
            self.fail(key, f"must be a finite number, got {value}")
            return default
        if above is not None and value <= above:
            self.fail(key, f"must be greater than {above:g}, got {value:g}")
            return default
        if at_least is not None and value < at_least:
            self.fail(key, f"must be at least {at_least:g}, got {value:g}")
            return default
        if at_most is not None and value > at_most:
            self.fail(key, f"must be at most {at_most:g}, got {value:g}")
            return default
        return value

    def choice(self, key: str, options: Sequence[str], default: str) -> str:
        if not self.has(key):
            return default
        value: str = self.value(key, str, default)
        if value not in options:
            self.fail(key, f"one of {', '.join(options)}, got {value!r}")
            return default
        return value

    def strings(self, key: str, default: list[str]) -> list[str]:
        """A list of non-empty strings."""
        value: list[Any] = self.value(key, list, default)
        good = [v for v in value if isinstance(v, str) and v and text_problem(v) is None]
        if len(good) != len(value):
            self.fail(key, "expected a list of non-empty strings")
        return good

    def name(self) -> str:
        value = self.raw("name")
        if not isinstance(value, str) or not value:
            self.fail("name", "required, a non-empty string")
            return ""
        if (problem := text_problem(value)) is not None:
            self.fail("name", problem)
            return ""
        return value

    def secret(self, key: str, base: Path | None) -> str | None:
        """`key` itself, or the contents of the file `key_file` names (one trailing newline
        dropped, as `echo` leaves it)."""
        inline: str | None = self.value(key, str, None)
        path: str | None = self.value(f"{key}_file", str, None)
        if path is None:
            return inline
        if inline is not None:
            both = f"{self.path(key)} and {self.path(key + '_file')}"
            self.problems.append(f"{both}: give one of them")
            return None
        try:
            return read_secret_file(path, base)
        except (OSError, ValueError) as exc:
            self.fail(f"{key}_file", str(exc))
            return None

    def section(self, key: str) -> Section:
        """The nested mapping under `key` (an empty one when absent or not a mapping)."""
        value = self.raw(key)
        if value is not None and not isinstance(value, dict):
            self.fail(key, f"expected {_TYPE_NAMES[dict]}, got {_describe(value)}")
            value = None
        return Section(value or {}, self.path(key), self.problems)

    def sections(self, key: str) -> list[Section]:
        """The list of mappings under `key`; an entry that is no mapping is reported and
        skipped."""
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, f"expected a list of mappings, got {_describe(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            where = f"{self.path(key)}[{i}]"
            if isinstance(item, dict):
                out.append(Section(item, where, self.problems))
            else:
                self.problems.append(f"{where}: expected a mapping, got {_describe(item)}")
        return out

    def finish(self) -> None:
        """Reports every key no read asked for, with the nearest known one."""
        for key in self.data:
            text = str(key)
            if text in self.known:
                continue
            near = difflib.get_close_matches(text, sorted(self.known), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(sorted(self.known))}"
            self.fail(text, f"unknown key; {hint}")
