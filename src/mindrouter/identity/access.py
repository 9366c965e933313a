"""Which models a caller may use: name patterns a group (and later any other holder of rules,
such as an account) may list.

A rule is a list of `fnmatch` patterns matched against a model's name and each of its aliases;
no list at all means every model. A caller may use a model only when every rule that applies to
them allows it, so a narrower holder added later can only take models away, never add them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from mindrouter.routing.catalog import ModelSpec


@dataclass(frozen=True, slots=True)
class ModelAccess:
    # None: every model; otherwise the patterns (`qwen3-*`, `llama-3.1-70b`) a model must match.
    patterns: tuple[str, ...] | None = None

    def allows(self, spec: ModelSpec) -> bool:
        if self.patterns is None:
            return True
        names = (spec.name, *spec.aliases)
        return any(fnmatchcase(n, p) for p in self.patterns for n in names)


EVERY_MODEL = ModelAccess()


def access_from(models: Iterable[str] | None) -> ModelAccess:
    return EVERY_MODEL if models is None else ModelAccess(tuple(models))


def may_use(rules: Iterable[ModelAccess], spec: ModelSpec) -> bool:
    return all(rule.allows(spec) for rule in rules)
