"""The one Lua script behind RedisFairShareState: push every pending write, pull every value.

Keys (the model name comes last, after a fixed kind, so no model name collides with another key):

    {prefix}fairshare:floors            hash    model -> floor (virtual time)
    {prefix}fairshare:counters:{model}  hash    user -> counter (weighted service)
    {prefix}fairshare:sent:{sender}     string  sequence number of the sender's last batch

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

The reply is the p counters then the g floors, as strings ('' where nothing was ever written):
Lua numbers returned raw would be truncated to integers.
"""

from __future__ import annotations

EXCHANGE = """
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
for _ = 1, n do
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  i = i + 1
end
return out
"""
