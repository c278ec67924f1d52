-- renew.lua: compare-and-set expiry of a held lease.
--
-- KEYS[1] lease, KEYS[2] fence: the name's keys, as the key layout in doc.go
-- describes them.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the lease
-- ARGV[4] lock delay (ms): the lease key outlives the lease by it
-- ARGV[5] idle retention (ms): the fence key outlives the lease key by it
--
-- Returns {0} when (holder, token) does not hold an unexpired lease, else
-- {1, holder, token, value, ttl_ms, expires_ms}: the renewed lease, expiring
-- at expires_ms (unix ms, Redis' clock). decodeRenew in scripts.go is the one
-- reader of this reply.

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
local ttl = tonumber(ARGV[3])
local expires = now + ttl
redis.call('HSET', KEYS[1], 'ttl', ARGV[3], 'expires', string.format('%d', expires))
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[2], string.format('%d', ttl + tonumber(ARGV[4]) + tonumber(ARGV[5])))
return {1, cur[1], cur[2], cur[3], ttl, expires}
