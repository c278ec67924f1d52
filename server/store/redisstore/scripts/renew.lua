-- renew.lua: compare-and-set expiry of a held lease.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the lease
-- ARGV[4] ttl + lock delay + idle retention (ms): how long the lease key,
--         which keeps the fencing counter, lives after the renewal
--
-- Redis calls: 4 (HMGET, TIME, HSET, PEXPIRE).
--
-- Returns {0} when (holder, token) does not hold an unexpired lease, else
-- {1, holder, token, value, ttl_ms, expires_ms}: the renewed lease, expiring
-- at expires_ms (unix ms, Redis' clock). decodeRenew in scripts.go is the one
-- reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value', 'expires', 'watched')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return {0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(cur[4]) or 0) <= now then
  return {0} -- expired; only the lock delay keeps the name
end
local ttl = tonumber(ARGV[3])
local expires = now + ttl
redis.call('HSET', KEYS[1], 'ttl', ARGV[3], 'expires', string.format('%d', expires))
-- The key lives on, and never less than the name's observation mark.
if (tonumber(cur[5]) or 0) > now + tonumber(ARGV[4]) then
  redis.call('PEXPIREAT', KEYS[1], cur[5])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {1, cur[1], cur[2], cur[3], ttl, expires}
