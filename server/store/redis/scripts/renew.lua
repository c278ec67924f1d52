-- renew.lua: compare-and-set expiry of a held lease.
--
-- KEYS[1] lease  HASH holder, token, value, ttl (ms), expires (unix ms)
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the lease
-- ARGV[4] lock delay (ms): the key outlives the lease by it
--
-- Returns {0} when (holder, token) does not hold an unexpired lease, else
-- {1, value, ttl_ms, now_ms}: the lease now expires at now_ms + ttl_ms
-- (Redis' clock).

if redis.replicate_commands then redis.replicate_commands() end

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value', 'expires')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return {0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if cur[4] and tonumber(cur[4]) <= now then
  return {0} -- expired; only the lock delay keeps the key
end
redis.call('HSET', KEYS[1], 'ttl', ARGV[3], 'expires', string.format('%d', now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(ARGV[3]) + tonumber(ARGV[4])))
return {1, cur[3], tonumber(ARGV[3]), now}
