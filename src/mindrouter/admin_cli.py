"""Administration from the command line: migrate, keys, users (and their console passwords),
groups, backends.

`add_admin_commands(subparsers)` registers the commands on the `mindrouter` parser; each sets
`run`, a function of the parsed namespace returning the exit code. Every command takes
`--config FILE` (MINDROUTER_DATABASE_URL overrides its database). Errors go to stderr with a
non-zero code: 2 for a bad configuration, 1 for anything else.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from mindrouter.cli_support import (
    add_switch,
    add_verb,
    as_cell,
    given_options,
    noun_verbs,
    print_table,
    run_command,
    with_config,
)
from mindrouter.errors import InvalidRequest
from mindrouter.identity.passwords import Passwords, password_problem
from mindrouter.routing.backend_config import ENGINES, BackendConfig, BackendModel
from mindrouter.settings import load_settings
from mindrouter.stores.records import (
    GroupChanges,
    GroupLimits,
    LimitOverrides,
    UserChanges,
)
from mindrouter.stores.sql import (
    SqlStores,
    apply_config,
)
from mindrouter.stores.sql.migrate import schema_state, upgrade

if TYPE_CHECKING:
    from mindrouter.cli_support import Subparsers
LIMITS = ("token_budget", "rpm", "max_concurrent", "budget_period_days")


def _or_inherit(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text == "inherit" else kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names it in its errors
    return parse


def _limits(limits: GroupLimits | LimitOverrides) -> str:
    shown = {f: getattr(limits, f) for f in ("scheduler_weight", *LIMITS)}
    return " ".join(f"{f}={v}" for f, v in shown.items() if v is not None) or "-"


# -- migrate ---------------------------------------------------------------------------------


async def _migrate(stores: SqlStores, ns: argparse.Namespace) -> None:
    before = (await schema_state(stores.engine)).current
    state = await upgrade(stores.engine)
    print(f"database at revision {state.current} (was {before or 'empty'})")
    report = await apply_config(stores, load_settings(ns.config))
    print(f"config applied: {len(report.created)} created, {len(report.updated)} updated")
    for line in report.differences:
        print(f"changed {line}")
    for name in report.only_in_database:
        print(f"kept {name}: in the database only (made through the admin API or CLI)")


# -- keys ------------------------------------------------------------------------------------


async def _keys_create(stores: SqlStores, ns: argparse.Namespace) -> None:
    expires = None
    if ns.expires_days is not None:
        expires = datetime.now(UTC) + timedelta(days=ns.expires_days)
    created = await stores.keys.create_key(
        ns.user, admin=ns.admin, expires_at=expires, name=ns.name
    )
    info = created.info
    kind = "admin key" if info.is_admin else "key"
    until = f", expires {as_cell(info.expires_at)} UTC" if info.expires_at else ""
    print(f"created {kind} {info.prefix} (id {info.id}) for {info.user}{until}")
    print("store it now: it is shown only this once")
    print(created.key)


async def _keys_list(stores: SqlStores, ns: argparse.Namespace) -> None:
    fields = (
        "id",
        "prefix",
        "user",
        "is_admin",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    rows = [[getattr(k, f) for f in fields] for k in await stores.keys.list_keys(ns.user)]
    print_table(
        ("ID", "PREFIX", "USER", "ADMIN", "CREATED", "EXPIRES", "REVOKED", "LAST USED"), rows
    )


async def _keys_revoke(stores: SqlStores, ns: argparse.Namespace) -> None:
    info = await stores.keys.revoke_key(ns.key)
    print(f"revoked {info.prefix} (id {info.id}) of {info.user}")


# -- users and groups ------------------------------------------------------------------------


async def _users_create(stores: SqlStores, ns: argparse.Namespace) -> None:
    overrides = LimitOverrides(**given_options(ns, ("scheduler_weight", *LIMITS)))
    user = await stores.directory.create_user(
        ns.name, ns.group, active=not ns.inactive, overrides=overrides
    )
    print(f"created user {user.name} in group {user.group}")


async def _users_list(stores: SqlStores, ns: argparse.Namespace) -> None:
    users = await stores.directory.list_users(ns.group)
    rows = [[u.name, u.group, u.active, _limits(u.overrides)] for u in users]
    print_table(("NAME", "GROUP", "ACTIVE", "OVERRIDES"), rows)


async def _users_update(stores: SqlStores, ns: argparse.Namespace) -> None:
    changes = given_options(ns, ("group", "active", "scheduler_weight", *LIMITS))
    if hasattr(ns, "rename"):
        changes["name"] = ns.rename
    user = await stores.directory.update_user(ns.name, cast(UserChanges, changes))
    print(f"updated user {user.name}")


async def _users_deactivate(stores: SqlStores, ns: argparse.Namespace) -> None:
    await stores.directory.update_user(ns.name, {"active": False})
    print(f"deactivated user {ns.name}: their keys stop working within a second")


def _read_password(ns: argparse.Namespace) -> str:
    if getattr(ns, "password_stdin", False):
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"new console password for {ns.name}: ")
    if getpass.getpass("again: ") != first:
        raise InvalidRequest("the two passwords differ")
    return first


async def _users_set_password(stores: SqlStores, ns: argparse.Namespace) -> None:
    password = _read_password(ns)
    problem = password_problem(password)
    if problem is not None:
        raise InvalidRequest(problem)
    hashed = await Passwords().hash(password)
    admin = getattr(ns, "admin", None)
    account = await stores.accounts.save(ns.name, password_hash=hashed, is_admin=admin)
    role = "an administrator" if account.is_admin else "a user"
    print(f"{ns.name} can sign in to the console at /console as {role}")


async def _groups_create(stores: SqlStores, ns: argparse.Namespace) -> None:
    group = await stores.directory.create_group(
        ns.name, GroupLimits(**given_options(ns, ("scheduler_weight", *LIMITS))), ns.model
    )
    print(f"created group {group.name}")


async def _groups_list(stores: SqlStores, ns: argparse.Namespace) -> None:
    rows = [
        [g.name, _limits(g.limits), "all" if g.models is None else " ".join(g.models)]
        for g in await stores.directory.list_groups()
    ]
    print_table(("NAME", "LIMITS (0 = unlimited)", "MODELS"), rows)


async def _groups_update(stores: SqlStores, ns: argparse.Namespace) -> None:
    changes = given_options(ns, ("scheduler_weight", *LIMITS))
    if hasattr(ns, "rename"):
        changes["name"] = ns.rename
    if hasattr(ns, "model"):
        changes["models"] = ns.model
    if getattr(ns, "all_models", False):
        changes["models"] = None
    group = await stores.directory.update_group(ns.name, cast(GroupChanges, changes))
    print(f"updated group {group.name}")


# -- backends --------------------------------------------------------------------------------


def _served(specs: list[str] | None) -> list[BackendModel] | None:
    if specs is None:
        return None
    return [BackendModel(*s.split("=", 1)) if "=" in s else BackendModel(s, s) for s in specs]


async def _backends_list(stores: SqlStores, ns: argparse.Namespace) -> None:
    rows = [
        [
            *(
                getattr(c, f)
                for f in ("name", "engine", "url", "gpu", "max_concurrent", "priority", "enabled")
            ),
            "(discovered)" if c.models is None else ",".join(m.name for m in c.models),
        ]
        for c in (b.config for b in await stores.catalog.list_backends())
    ]
    print_table(("NAME", "ENGINE", "URL", "GPU", "SLOTS", "PRIORITY", "ENABLED", "MODELS"), rows)


async def _backends_create(stores: SqlStores, ns: argparse.Namespace) -> None:
    given = given_options(ns, ("gpu", "max_concurrent", "priority")).items()
    fields = {f: v for f, v in given if v is not None}
    config = BackendConfig(ns.name, ns.engine, ns.url, models=_served(ns.model), **fields)
    backend = await stores.catalog.create_backend(config)
    print(f"created backend {backend.config.name}")


async def _backends_update(stores: SqlStores, ns: argparse.Namespace) -> None:
    changes = given_options(ns, ("engine", "url", "gpu", "max_concurrent", "priority", "enabled"))
    if hasattr(ns, "model"):
        changes["models"] = _served(ns.model)
    await stores.catalog.update_backend(ns.name, changes)
    print(f"updated backend {ns.name}")


async def _backends_delete(stores: SqlStores, ns: argparse.Namespace) -> None:
    await stores.catalog.delete_backend(ns.name)
    print(f"deleted backend {ns.name}")


# -- the parser ------------------------------------------------------------------------------


def _limit_flags(parser: argparse.ArgumentParser, *, inherit: bool) -> None:
    hint = "'inherit': back to the group's value" if inherit else None
    for field in ("scheduler_weight", *LIMITS):
        kind: Callable[[str], Any] = float if field == "scheduler_weight" else int
        flag = "--weight" if field == "scheduler_weight" else "--" + field.replace("_", "-")
        parser.add_argument(
            flag,
            dest=field,
            type=_or_inherit(kind) if inherit else kind,
            default=argparse.SUPPRESS,
            help=hint,
        )


def _model_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        metavar="PATTERN",
        help="a model (or fnmatch pattern, `qwen3-*`) the group may use; repeat for more; "
        "without any, every model",
    )


def add_admin_commands(sub: Subparsers) -> None:
    """Registers migrate, keys, users, groups and backends on the `mindrouter` subparsers."""
    help_text = "apply the database migrations, then the config's groups, users, backends"
    migrate = with_config(sub.add_parser("migrate", help=help_text))
    migrate.set_defaults(run=run_command(_migrate, migrating=True))
    _key_commands(sub)
    _user_commands(sub)
    _group_commands(sub)
    _backend_commands(sub)


def _key_commands(sub: Subparsers) -> None:
    keys = noun_verbs(sub, "keys", "API keys")
    p = add_verb(keys, "create", _keys_create, "create a key; the key is the last line printed")
    p.add_argument("--user", required=True)
    p.add_argument("--admin", action="store_true", help="a key for the admin API")
    p.add_argument("--expires-days", type=int, metavar="N")
    p.add_argument("--name", help="a label for the key")
    add_verb(keys, "list", _keys_list, "list keys (never their secrets)").add_argument("--user")
    add_verb(keys, "revoke", _keys_revoke, "revoke a key").add_argument(
        "key", metavar="KEY", help="the full key, its prefix (mr2_ + 8 characters) or its id"
    )


def _user_commands(sub: Subparsers) -> None:
    users = noun_verbs(sub, "users", "users")
    p = add_verb(users, "create", _users_create, "create a user")
    p.add_argument("name")
    p.add_argument("--group", required=True)
    p.add_argument("--inactive", action="store_true")
    _limit_flags(p, inherit=True)
    add_verb(users, "list", _users_list, "list users").add_argument("--group")
    p = add_verb(
        users, "update", _users_update, "change a user's group, state or limits", partial=True
    )
    p.add_argument("name")
    p.add_argument("--group")
    p.add_argument("--rename", metavar="NEW_NAME")
    add_switch(p, "active", "--active", "--inactive")
    _limit_flags(p, inherit=True)
    add_verb(users, "deactivate", _users_deactivate, "stop a user's keys working").add_argument(
        "name"
    )
    p = add_verb(users, "set-password", _users_set_password, "set a console password", partial=True)
    p.add_argument("name")
    p.add_argument("--password-stdin", action="store_true", help="read it from standard input")
    add_switch(p, "admin", "--admin", "--no-admin")


def _group_commands(sub: Subparsers) -> None:
    groups = noun_verbs(sub, "groups", "groups")
    p = add_verb(groups, "create", _groups_create, "create a group")
    p.add_argument("name")
    _limit_flags(p, inherit=False)
    _model_flag(p)
    add_verb(groups, "list", _groups_list, "list groups")
    p = add_verb(groups, "update", _groups_update, "change a group's limits", partial=True)
    p.add_argument("name")
    p.add_argument("--rename", metavar="NEW_NAME")
    _limit_flags(p, inherit=False)
    _model_flag(p)
    p.add_argument("--all-models", action="store_true", help="let the group use every model again")


def _backend_commands(sub: Subparsers) -> None:
    backends = noun_verbs(sub, "backends", "backends")
    add_verb(backends, "list", _backends_list, "list backends")
    for verb, action in (("create", _backends_create), ("update", _backends_update)):
        creating = verb == "create"
        p = add_verb(backends, verb, action, f"{verb} a backend", partial=not creating)
        p.add_argument("name")
        p.add_argument("--engine", required=creating, choices=ENGINES)
        p.add_argument("--url", required=creating)
        p.add_argument("--gpu")
        p.add_argument("--max-concurrent", type=int)
        p.add_argument("--priority", type=int)
        p.add_argument(
            "--model",
            action="append",
            metavar="NAME[=UPSTREAM]",
            help="a model it serves (repeatable); none: discovered",
        )
        if not creating:
            add_switch(p, "enabled", "--enable", "--disable")
    add_verb(backends, "delete", _backends_delete, "delete a backend").add_argument("name")
