"""The one Lua script behind RedisFairShareState: push every pending write, pull every value.

Keys (the model name comes last, after a fixed kind, so no model name collides with another key):

    {prefix}fairshare:floors            hash    model -> floor (virtual time)
    {prefix}fairshare:counters:{model}  hash    user -> counter (weighted service)
    {prefix}fairshare:sent:{sender}     string  sequence number of the sender's last batch
    {prefix}fairshare:pending:{sender}:{model}  hash  user -> the sender's pending output
    {prefix}fairshare:pending_senders:{model}   set   senders that published pending output

Values are stored as '%.17g' strings, which read back as the same double; a value never written
counts as 0, as in the in-process state. Counters and floors have no TTL (one small field per
account, like the dictionaries they stand in for); a sender's sequence key expires a day after its
last exchange.

Exactly once. A batch whose reply was lost (a timeout after the script ran) is sent again with the
same sequence number, and its writes are skipped if that number was already applied: the adds
are not idempotent, and a retried charge would count twice.

KEYS[1] is the floors hash, KEYS[2] the sender's sequence key, KEYS[3..] the counter hashes of the
models involved. ARGV:

    seq, ttl_s
    n, then n × (key index, user, add, at_least or '')   counter := max(counter + add, at_least)
    f, then f × (model, value)                           floor := max(floor, value)
    p, then p × (key index, user)                        counters to read back
    g, then g × model                                    floors to read back

    pending_ttl_ms, key prefix ({prefix}fairshare:), sender id
    q, then q × (model, m, then m × (user, value))       the sender's pending output, replaced

The reply is the p counters then the g floors, as strings ('' where nothing was ever written):
Lua numbers returned raw would be truncated to integers. Then, for each of the g models, the
number k of (user, value) pairs that follow: the other senders' pending output for that model
(one pair per sender and user; the caller sums them).

Pending output is published whole by each sender at every exchange, as values (idempotent, so
it needs no sequence check), into a hash that expires `pending_ttl_ms` later unless published
again: the pending output of a process that stopped exchanging (it died, or lost Redis) stops
counting then. Senders whose hash expired are dropped from the model's set when read.
"""

from __future__ import annotations

from mindrouter.stores.shared import PRESENCE_LUA

EXCHANGE = (
    PRESENCE_LUA
    + """
local function num(x) return string.format('%.17g', x) end
local seq = tonumber(ARGV[1])
local fresh = seq > (tonumber(redis.call('GET', KEYS[2])) or 0)
local i = 3
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  if fresh then
    local key, user = KEYS[tonumber(ARGV[i])], ARGV[i + 1]
    local value = (tonumber(redis.call('HGET', key, user)) or 0) + tonumber(ARGV[i + 2])
    if ARGV[i + 3] ~= '' then
      local at_least = tonumber(ARGV[i + 3])
      if at_least > value then value = at_least end
    end
    redis.call('HSET', key, user, num(value))
  end
  i = i + 4
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  if fresh then
    local model, to = ARGV[i], tonumber(ARGV[i + 1])
    if to > (tonumber(redis.call('HGET', KEYS[1], model)) or 0) then
      redis.call('HSET', KEYS[1], model, num(to))
    end
  end
  i = i + 2
end
if fresh then redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2]) end
local out = {}
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  out[#out + 1] = redis.call('HGET', KEYS[tonumber(ARGV[i])], ARGV[i + 1]) or ''
  i = i + 2
end
n = tonumber(ARGV[i]); i = i + 1
local models = {}
for _ = 1, n do
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  models[#models + 1] = ARGV[i]
  i = i + 1
end
local ttl_ms, prefix, sender = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
i = i + 3
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local model, m = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  local key = prefix .. 'pending:' .. sender .. ':' .. model
  local senders = prefix .. 'pending_senders:' .. model
  redis.call('DEL', key)
  for _ = 1, m do
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  if m > 0 then
    present(key, senders, sender, ttl_ms)
  else
    redis.call('SREM', senders, sender)
  end
end
for _, model in ipairs(models) do
  local senders = prefix .. 'pending_senders:' .. model
  local pairs_out = {}
  local function key_of(id) return prefix .. 'pending:' .. id .. ':' .. model end
  for _, seen in ipairs(others(senders, sender, key_of)) do
    for j = 1, #seen[2] do pairs_out[#pairs_out + 1] = seen[2][j] end
  end
  out[#out + 1] = tostring(#pairs_out / 2)
  for j = 1, #pairs_out do out[#out + 1] = pairs_out[j] end
end
return out
"""
)
