"""The Lua scripts behind RedisLimitStore: one per admit, one per settle, one read-only snapshot.

They mirror `model.roll_period` and `model.check_limits` line for line. Keys per user (the user
name comes last, after a fixed kind, so no user name can collide with another user's keys):

    {prefix}limits:usage:{user}         hash   start, used, reserved, lifetime, at,  (no TTL)
                                               seeded
    {prefix}limits:window:{user}        zset   lease id -> admission time           (TTL ~2 min)
    {prefix}limits:leases:{user}        zset   lease id -> lease expiry (renewed)   (TTL ~lease)
    {prefix}limits:lease_tokens:{user}  hash   lease id -> reserved tokens          (TTL ~lease)
    {prefix}limits:dirty                set    users changed since the last dirty()

Lease expiry compares the caller's `now`, never Redis TIME; key TTLs are only garbage collection
for idle users. `reserved` is a counter kept equal to the tokens of the leases in the zset, and
reset to 0 whenever the zset is empty, which also heals it if the lease keys expired by TTL.
Numbers go back to Python as strings: Lua numbers returned raw would be truncated to integers.

`seeded` is set when a process loads the user's usage from the database (SEED). A server that
lost its data (restarted empty, flushed, failed over without it) has no `seeded` for anyone:
ADMIT then answers {2} and admits nothing until the caller has loaded the user's usage again,
so a budget is never checked against counters that started again from zero; SNAPSHOT answers
{2} too, so no usage view shows those counters either.
"""

from __future__ import annotations

_COMMON = """
local function num(x) return string.format('%.17g', x) end
local function int(x) return string.format('%d', x) end

local function roll(start, used, period, now)
  if start and now >= start + period then
    return start + math.floor((now - start) / period) * period, 0
  end
  return start, used
end

-- Sum of the reserved tokens of `ids`, in chunks to stay under Lua's unpack() limit.
local function tokens_of(tokens_key, ids)
  local total = 0
  for i = 1, #ids, 256 do
    local amounts = redis.call('HMGET', tokens_key, unpack(ids, i, math.min(i + 255, #ids)))
    for _, amount in ipairs(amounts) do
      if amount then total = total + tonumber(amount) end
    end
  end
  return total
end

-- Drops leases that expired at or before `now`; returns the tokens they had reserved.
local function reap(leases_key, tokens_key, now)
  local released = 0
  while true do
    local expired = redis.call('ZRANGEBYSCORE', leases_key, '-inf', num(now), 'LIMIT', 0, 256)
    if #expired == 0 then return released end
    released = released + tokens_of(tokens_key, expired)
    redis.call('HDEL', tokens_key, unpack(expired))
    redis.call('ZREM', leases_key, unpack(expired))
  end
end

local function held(usage_key, leases_key, tokens_key, now)
  local reserved = (tonumber(redis.call('HGET', usage_key, 'reserved')) or 0)
    - reap(leases_key, tokens_key, now)
  if reserved < 0 or redis.call('ZCARD', leases_key) == 0 then reserved = 0 end
  return reserved
end
"""

# KEYS: usage, window, leases, lease_tokens, dirty
# ARGV: now, budget, rpm, max_concurrent, period_seconds, estimate, lease_id, lease_expires,
#       user, window_seconds, busy_retry_seconds, window_ttl_ms, lease_ttl_ms
# Returns {1, start} when admitted, {0, reason, wait, used, reserved, in_flight} when refused,
# {2} when the user's usage has not been loaded from the database into this server.
ADMIT = (
    _COMMON
    + """
if redis.call('HEXISTS', KEYS[1], 'seeded') == 0 then return {2} end
local now, budget, rpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local max_concurrent, period = tonumber(ARGV[4]), tonumber(ARGV[5])
local estimate, window, busy = tonumber(ARGV[6]), tonumber(ARGV[10]), tonumber(ARGV[11])

local before = tonumber(redis.call('HGET', KEYS[1], 'reserved')) or 0
local reserved = held(KEYS[1], KEYS[3], KEYS[4], now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', num(now - window))
local state = redis.call('HMGET', KEYS[1], 'start', 'used')
local old_start = tonumber(state[1])
local start, used = roll(old_start, tonumber(state[2]) or 0, period, now)
local in_flight = redis.call('ZCARD', KEYS[3])
local count = redis.call('ZCARD', KEYS[2])

local reason, wait = nil, -math.huge
local function consider(r, w) if w > wait then reason, wait = r, w end end
if budget > 0 then
  if used + estimate > budget then
    if start then consider('budget', start + period - now) else consider('budget', period) end
  elseif used + reserved + estimate > budget then
    consider('reserved', busy)
  end
end
if rpm > 0 and count >= rpm then
  local entry = redis.call('ZRANGE', KEYS[2], count - rpm, count - rpm, 'WITHSCORES')
  consider('rpm', tonumber(entry[2]) + window - now)
end
if max_concurrent > 0 and in_flight >= max_concurrent then consider('concurrency', busy) end

if reason then
  if reserved ~= before then redis.call('HSET', KEYS[1], 'reserved', int(reserved)) end
  return {0, reason, num(wait), int(used), int(reserved), int(in_flight)}
end

if not start then start = now end
if start ~= old_start then redis.call('SADD', KEYS[5], ARGV[9]) end
redis.call('HSET', KEYS[1], 'start', num(start), 'used', int(used),
  'reserved', int(reserved + estimate), 'at', ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[7])
redis.call('PEXPIRE', KEYS[2], ARGV[12])
redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
redis.call('HSET', KEYS[4], ARGV[7], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[13])
redis.call('PEXPIRE', KEYS[4], ARGV[13])
return {1, num(start)}
"""
)

# KEYS: usage, leases, lease_tokens, dirty
# ARGV: now, lease_id, used_tokens, period_seconds, ticket_period_start, user
SETTLE = (
    _COMMON
    + """
local now, tokens, period = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
local reserved = held(KEYS[1], KEYS[2], KEYS[3], now)
local lease = redis.call('HGET', KEYS[3], ARGV[2])
if lease then
  -- Absent when the lease expired and was reaped: its reservation is already released.
  reserved = math.max(reserved - tonumber(lease), 0)
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[2])
end
if redis.call('ZCARD', KEYS[2]) == 0 then reserved = 0 end
local state = redis.call('HMGET', KEYS[1], 'start', 'used', 'lifetime')
local start = tonumber(state[1]) or tonumber(ARGV[5])
local used
start, used = roll(start, tonumber(state[2]) or 0, period, now)
redis.call('HSET', KEYS[1], 'start', num(start), 'used', int(used + tokens),
  'reserved', int(reserved), 'lifetime', int((tonumber(state[3]) or 0) + tokens), 'at', ARGV[1])
redis.call('SADD', KEYS[4], ARGV[6])
return 1
"""
)

# Read-only. KEYS: usage, window, leases, lease_tokens
# ARGV: now, period_seconds, window_seconds; now and period may be empty strings, meaning
# "as of the user's last change, no rollover" (what dirty() reports).
# Returns {2} for a read as of `now` when the user's usage has not been loaded into this server
# (as ADMIT does: zeros there would be counters that started again, not the user's usage), {}
# for an unknown user, else {start, used, reserved, lifetime, in_flight, recent, as_of}.
SNAPSHOT = (
    _COMMON
    + """
if ARGV[1] ~= '' and redis.call('HEXISTS', KEYS[1], 'seeded') == 0 then return {2} end
local state = redis.call('HMGET', KEYS[1], 'start', 'used', 'lifetime', 'at')
local now = tonumber(ARGV[1]) or tonumber(state[4])
if not now then return {} end
local start, used = tonumber(state[1]), tonumber(state[2]) or 0
if ARGV[2] ~= '' then start, used = roll(start, used, tonumber(ARGV[2]), now) end
local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. num(now), '+inf')
local recent = redis.call('ZCOUNT', KEYS[2], '(' .. num(now - tonumber(ARGV[3])), '+inf')
return {start and num(start) or '', int(used), int(tokens_of(KEYS[4], live)),
  int(tonumber(state[3]) or 0), int(#live), int(recent), num(now)}
"""
)

# KEYS: usage, window, leases, lease_tokens
# ARGV: period_start (empty: no usage yet), period_tokens, lifetime_tokens, restored lease expiry,
#       window_ttl_ms, lease_ttl_ms, requests in flight, now, admission times of the last minute...
# Newer wins: the lifetime total only grows, so a larger stored one means the store is ahead.
# The first seed since the server lost its data records when (`seeded` holds that time), and
# restores the window and, as leases of no tokens named `restored:*`, the requests in flight;
# each process takes its own requests' leases back at its next renewal (RENEW), in place of
# these, and the ones nobody takes back (requests that ended meanwhile) lapse after one lease.
SEED = """
if redis.call('HEXISTS', KEYS[1], 'seeded') == 0 then
  redis.call('HSET', KEYS[1], 'seeded', ARGV[8])
  for i = 9, #ARGV do redis.call('ZADD', KEYS[2], ARGV[i], 'restored:' .. i) end
  if #ARGV >= 9 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
  local in_flight = tonumber(ARGV[7])
  for i = 1, in_flight do
    redis.call('ZADD', KEYS[3], ARGV[4], 'restored:' .. i)
    redis.call('HSET', KEYS[4], 'restored:' .. i, '0')
  end
  if in_flight > 0 then
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
    redis.call('PEXPIRE', KEYS[4], ARGV[6])
  end
end
if ARGV[1] == '' then return 0 end
local state = redis.call('HMGET', KEYS[1], 'start', 'lifetime')
if state[1] and (tonumber(state[2]) or 0) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'start', ARGV[1], 'used', ARGV[2], 'lifetime', ARGV[3])
return 1
"""

# KEYS: usage, leases, lease_tokens
# ARGV: now, new expiry, lease_ttl_ms, then for each lease: id, admission time, reserved tokens.
# A lease still held (not settled, not expired) is extended. A lease that is gone although the
# server lost its data after the lease's admission (`seeded` is later) went with the data: its
# request is still in flight in the calling process, so the lease comes back with its
# reservation, in place of one of the leases restored from the audit trail at the reload. Any other
# missing lease was settled or expired, and is never re-created.
RENEW = """
local now = tonumber(ARGV[1])
local lost_at = tonumber(redis.call('HGET', KEYS[1], 'seeded'))
local renewed = 0
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local expires = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if expires then
    if expires > now then
      redis.call('ZADD', KEYS[2], 'XX', ARGV[2], id)
      renewed = renewed + 1
    end
  elseif lost_at and lost_at > tonumber(ARGV[i + 1]) then
    for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      if string.sub(member, 1, 9) == 'restored:' then
        redis.call('ZREM', KEYS[2], member)
        redis.call('HDEL', KEYS[3], member)
        break
      end
    end
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    redis.call('HSET', KEYS[3], id, ARGV[i + 2])
    redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[i + 2])
    renewed = renewed + 1
  end
end
if renewed > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return renewed
"""
