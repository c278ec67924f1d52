-- refresh_waiters.lua: keep a coordinator's parked waiters of a name queued,
-- in one call however many they are.
--
-- KEYS[1] queue, KEYS[2] waiters, KEYS[3] lease: the name's keys, as the key
-- layout in doc.go describes them.
-- ARGV[1] waiter ttl (ms, >= 1): the listed waiters' new deadline is now + it
-- ARGV[2] pub/sub channel
-- ARGV[3] name (announced on the channel when the head of the queue is
--         dropped: the name and a newline, as doc.go's key layout says)
-- ARGV[4..] waiter ids
--
-- Waiters whose deadline passed are dropped first (a bounded batch, as in
-- acquire.lua), so that a dead waiter is never revived; a listed waiter that
-- is not queued is ignored, never queued again (ZADD XX). The queue keys
-- expire at the latest deadline, as acquire.lua keeps them.
--
-- Returns how many deadlines moved (ZADD CH: a waiter refreshed twice in one
-- millisecond counts once); decodeRefresh in scripts.go reads the reply.

local queue, waiters, lease = KEYS[1], KEYS[2], KEYS[3]
local ttl, channel, name = tonumber(ARGV[1]), ARGV[2], ARGV[3]

local function ms(n) return string.format('%d', n) end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', '(' .. ms(now), 'LIMIT', 0, 100)
if #gone > 0 then
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  redis.call('ZREM', waiters, unpack(gone))
  redis.call('ZREM', queue, unpack(gone))
  local head_gone = false
  for _, w in ipairs(gone) do
    if w == head then head_gone = true end
  end
  -- The new head may not know that it is now first in line.
  if head_gone and (redis.call('EXISTS', queue) > 0 or (tonumber(redis.call('HGET', lease, 'watched')) or 0) > now) then
    redis.call('PUBLISH', channel, name .. '\n')
  end
end

local deadline = ms(now + ttl)
local queued = 0
-- In batches: unpack has a limit on the number of values it returns.
local batch = {}
local function flush()
  if #batch > 0 then
    queued = queued + redis.call('ZADD', waiters, 'XX', 'CH', unpack(batch))
    batch = {}
  end
end
for i = 4, #ARGV do
  batch[#batch + 1] = deadline
  batch[#batch + 1] = ARGV[i]
  if #batch >= 1000 then flush() end
end
flush()

local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')[2]
if last then
  last = ms(tonumber(last))
  redis.call('PEXPIREAT', queue, last)
  redis.call('PEXPIREAT', waiters, last)
end
return queued
