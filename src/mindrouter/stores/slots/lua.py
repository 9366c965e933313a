"""The slot board's one Lua script, and the wire form of what it carries.

Keys: `{prefix}slots:of:{process}`, a hash per live process (`alive`, `b:{backend}` -> its open
requests, `m:{model}` -> its best waiter's standing as `tier score user`), expiring `ttl` after
the process's last exchange, and `{prefix}slots:senders`, the set of live processes.

ARGV: the key prefix ({prefix}slots:), this process's id, the ttl in ms, '1' to publish or '0'
to withdraw, then nb and nb × (backend, open requests), nm and nm × (model, standing). The script
replaces this process's hash (or deletes it) and replies, for every other live process, its id,
the number n of its fields, then n × (field, value); a process whose hash expired is dropped
from the set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mindrouter.scheduling import Standing
from mindrouter.stores.shared import PRESENCE_LUA

EXCHANGE = (
    PRESENCE_LUA
    + """
local prefix, me, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local senders, mine = prefix .. 'senders', prefix .. 'of:' .. ARGV[2]
redis.call('DEL', mine)
if ARGV[4] == '1' then
  redis.call('HSET', mine, 'alive', '1')
  local i = 5
  for _, kind in ipairs({'b:', 'm:'}) do
    local n = tonumber(ARGV[i]); i = i + 1
    for _ = 1, n do
      redis.call('HSET', mine, kind .. ARGV[i], ARGV[i + 1])
      i = i + 2
    end
  end
  present(mine, senders, me, ttl)
else
  redis.call('SREM', senders, me)
end
local out = {}
for _, seen in ipairs(others(senders, me, function(id) return prefix .. 'of:' .. id end)) do
  local kv = seen[2]
  out[#out + 1] = seen[1]
  out[#out + 1] = tostring(#kv / 2)
  for j = 1, #kv do out[#out + 1] = kv[j] end
end
return out
"""
)


class UnreadableReply(ValueError):
    """The script's reply is not what it writes."""


@dataclass(slots=True)
class Seen:
    """Another process as its last exchange published it."""

    slots: dict[str, int] = field(default_factory=dict)  # backend -> open requests
    best: dict[str, Standing] = field(default_factory=dict)  # model -> best waiter


def arguments(
    prefix: str,
    me: str,
    *,
    ttl_ms: int,
    slots: Mapping[str, int],
    best: Mapping[str, Standing],
    publish: bool,
) -> list[str | int]:
    args: list[str | int] = [prefix, me, ttl_ms, "1" if publish else "0", len(slots)]
    for name, n in slots.items():
        args += [name, n]
    args.append(len(best))
    for model, s in best.items():
        args += [model, f"{s.tier} {s.score!r} {s.user}"]
    return args


def parse(values: list[str]) -> dict[str, Seen]:
    """process id -> what it published; raises UnreadableReply."""
    out: dict[str, Seen] = {}
    i = 0
    try:
        while i < len(values):
            process, n = values[i], int(values[i + 1])
            seen = out[process] = Seen()
            for j in range(i + 2, i + 2 + 2 * n, 2):
                key, value = values[j], values[j + 1]
                kind, name = key[:2], key[2:]
                if kind == "b:":
                    seen.slots[name] = int(value)
                elif kind == "m:":
                    tier, score, user = value.split(" ", 2)
                    seen.best[name] = Standing(int(tier), float(score), user)
            i += 2 + 2 * n
    except (ValueError, IndexError):
        raise UnreadableReply(f"unreadable reply of {len(values)} values") from None
    return out
