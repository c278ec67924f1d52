-- renew.lua: compare-and-set expiry of a held lease.
--
-- KEYS[1] lease  HASH holder, token, value, ttl (ms)
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the lease
--
-- Returns {0} when (holder, token) does not hold the lease, else
-- {1, value, ttl_ms, now_ms}: the lease now expires at now_ms + ttl_ms
-- (Redis' clock).

if redis.replicate_commands then redis.replicate_commands() end

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return {0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HSET', KEYS[1], 'ttl', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, cur[3], tonumber(ARGV[3]), now}
