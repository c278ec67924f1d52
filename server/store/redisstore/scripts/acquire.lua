-- acquire.lua: grant a lease, renew it for its holder, or queue a waiter.
--
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] waiters, KEYS[4] marker (the name's
-- data-loss marker): the name's keys, as the key layout in doc.go describes
-- them.
-- ARGV[1] holder
-- ARGV[2] ttl (ms, >= 1)
-- ARGV[3] value
-- ARGV[4] waiter id, or "" for a caller that does not wait
-- ARGV[5] waiter ttl (ms, >= 1)
-- ARGV[6] quarantine (ms, 0 disables)
-- ARGV[7] pub/sub channel
-- ARGV[8] name (published on the channel)
-- ARGV[9] lock delay (ms): how long a lease that expired (was not released)
--         keeps its name from being granted again
-- ARGV[10] "1" to keep the stored value when ARGV[1] already holds the name
--          (a lock call on an election's name), else ""
-- ARGV[11] idle retention (ms): how long the lease key outlives the lease
--          and its lock delay, keeping the fencing counter
-- ARGV[12] token (decimal) the caller must hold the name under, or "": with
--          it the call only renews that grant, and is otherwise refused
--          (status 0, no holder) without a grant or a place in the queue
-- ARGV[13] ttl + lock delay + idle retention (ms): how long the lease key,
--          which keeps the fencing counter, lives after a grant or renewal
--
-- Redis calls: an uncontended grant runs 5 (TIME, GET marker, HMGET, HSET,
-- PEXPIRE); a renewal by the holder 5; a refusal without waiting 3.
--
-- Returns, with lost = 1 when this call found the marker missing (Redis lost
-- its data), else 0, and every time in unix ms of Redis' clock:
--   {-1, lost, retry_after_ms}                                       quarantined
--   {status, lost, holder, token, value, ttl_ms, expires_ms, retry_at_ms}
-- status 1: granted or renewed for ARGV[1]; 0: refused. holder .. expires_ms
-- are the granted lease, or the current holder's ("", "", "", 0, 0 when the
-- name is free: older waiters come first, or it is in its lock delay); token
-- is a decimal string. retry_at_ms, when refused, is the earliest the name may
-- be granted: the end of the holder's lease or of the lock delay; 0 when that
-- depends on older waiters instead, and when granted. decodeAcquire in
-- scripts.go is the one reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local lease, queue, waiters, marker = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holder, ttl, value, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local waiter_ttl, quarantine, channel, name = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]
local delay, keep_value, idle, expected = tonumber(ARGV[9]), ARGV[10] == '1', tonumber(ARGV[11]), ARGV[12]

-- Integers are formatted with %d: Lua's tostring would print 1.8e+15.
local function ms(n) return string.format('%d', n) end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- 1. Data loss: the marker is written at start-up and never expires, so its
-- absence means Redis lost its data (restart without persistence, FLUSHALL,
-- failover to an empty replica).
local lost = 0
local until_ms = redis.call('GET', marker)
if until_ms then
  until_ms = tonumber(until_ms) or 0
else
  lost = 1
  until_ms = now + quarantine
  redis.call('SET', marker, ms(until_ms))
end
if now < until_ms then
  return {-1, lost, until_ms - now}
end

-- 'token' is the last token issued: it stays when the lease ends, as the
-- name's fencing counter.
local cur = redis.call('HMGET', lease, 'holder', 'token', 'value', 'ttl', 'expires', 'queued', 'watched')
local expires = tonumber(cur[5]) or 0
local queued, watched = cur[6] == '1', tonumber(cur[7]) or 0
local held = cur[1] and expires > now
-- A lease that expired without a release keeps its name for the lock delay.
local delayed = cur[1] and not held and expires + delay > now
if expected ~= '' and not (held and cur[1] == holder and cur[2] == expected) then
  return {0, lost, '', '', '', 0, 0, 0}
end

-- The lease key outlives the lease by the lock delay and the idle retention
-- (ARGV[13], their sum with the ttl, in ms), and the name's observation mark.
local function keep_key()
  if watched > now + tonumber(ARGV[13]) then
    redis.call('PEXPIREAT', lease, cur[7])
  else
    redis.call('PEXPIRE', lease, ARGV[13])
  end
end

-- Grants the free name to ARGV[1] and returns the token, a decimal string.
-- The token is the counter plus one, but never below the clock in
-- microseconds: a counter that is gone (the name was idle past its retention,
-- or data loss) or behind (a failover to a replica that missed the last
-- grants) still yields a token above every one issued before, as long as the
-- clock does not step back.
local function grant()
  local token = (tonumber(cur[2]) or 0) + 1
  if token <= tonumber(time[1]) * 1000000 + tonumber(time[2]) then
    token = time[1] .. string.format('%06d', tonumber(time[2]))
  else
    token = ms(token)
  end
  redis.call('HSET', lease, 'holder', holder, 'token', token, 'value', value, 'ttl', ARGV[2], 'expires', ms(now + ttl))
  keep_key()
  return token
end

-- 0. Free, and nobody queues for the name or observes it: grant at once.
-- This is 4. below with nothing to prune, no head, nothing to leave and no
-- one to tell, in fewer commands: the uncontended lock.
if not held and not delayed and not queued and watched <= now then
  return {1, lost, holder, grant(), value, ttl, now + ttl, 0}
end

-- Announces a change of the name on the channel, when anyone listens: a
-- queued waiter or an observer. Uncontended locks then cost no pub/sub
-- traffic at all.
local function announce()
  if queued or watched > now then
    redis.call('PUBLISH', channel, name)
  end
end

-- Drops waiters whose deadline passed (a bounded batch; the head is checked
-- again before a grant); returns how many.
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', '(' .. ms(now), 'LIMIT', 0, 100)
  if #gone > 0 then
    redis.call('ZREM', waiters, unpack(gone))
    redis.call('ZREM', queue, unpack(gone))
  end
  return #gone
end

-- Queues the waiter behind the last one (keeping its place if queued) and
-- pushes its deadline out; the queue keys expire with their last deadline.
-- The lease key's 'queued' flag tells the uncontended path to look, and the
-- lease key outlives the deadline.
local function enqueue()
  if not redis.call('ZSCORE', queue, waiter) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local order = 1
    if last[2] then order = tonumber(last[2]) + 1 end
    redis.call('ZADD', queue, ms(order), waiter)
  end
  redis.call('ZADD', waiters, ms(now + waiter_ttl), waiter)
  local latest = tonumber(redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIREAT', queue, ms(latest))
  redis.call('PEXPIREAT', waiters, ms(latest))
  if not queued then
    queued = true
    redis.call('HSET', lease, 'queued', '1')
  end
  local pttl = redis.call('PTTL', lease)
  if pttl < 0 or now + pttl < latest then
    redis.call('PEXPIREAT', lease, ms(latest))
  end
end

local function unqueue()
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', waiters, waiter)
end

if delayed then
  if waiter ~= '' then
    prune()
    enqueue()
  end
  return {0, lost, '', '', '', 0, 0, expires + delay}
end
if held then
  -- 2. Held by the caller: renew, keeping the token.
  if cur[1] == holder then
    if keep_value then value = cur[3] end
    redis.call('HSET', lease, 'value', value, 'ttl', ARGV[2], 'expires', ms(now + ttl))
    keep_key()
    if waiter ~= '' then unqueue() end
    if cur[3] ~= value then announce() end
    return {1, lost, holder, cur[2], value, ttl, now + ttl, 0}
  end
  -- 3. Held by another holder.
  if waiter ~= '' then
    prune()
    enqueue()
  end
  return {0, lost, cur[1], cur[2], cur[3], tonumber(cur[4]) or 0, expires, expires}
end

-- 4. Free: the oldest live waiter comes first.
local pruned = prune()
local head
while true do
  head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head then break end
  local deadline = redis.call('ZSCORE', waiters, head)
  if deadline and tonumber(deadline) >= now then break end
  redis.call('ZREM', queue, head)
  redis.call('ZREM', waiters, head)
  pruned = pruned + 1
end
if not head and queued then
  -- Nobody waits any more: the uncontended path may grant again.
  queued = false
  redis.call('HDEL', lease, 'queued')
end
if head and head ~= waiter then
  if waiter ~= '' then enqueue() end
  -- The head may not know that it is now first in line.
  if pruned > 0 then announce() end
  return {0, lost, '', '', '', 0, 0, 0}
end

local token = grant()
if waiter ~= '' then unqueue() end
announce()
return {1, lost, holder, token, value, ttl, now + ttl, 0}
