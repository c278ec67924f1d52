-- release.lua: compare-and-set end of a held lease.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it;
-- the release is announced while waiters are queued or the name is observed.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] pub/sub channel
-- ARGV[4] name (published on the channel)
-- ARGV[5] idle retention (ms): how long the lease key, and with it the
--         fencing counter (its 'token'), outlives the release
--
-- Redis calls: 4 (HMGET, TIME, HDEL, PEXPIRE), and PUBLISH when someone
-- listens.
--
-- Returns 1 when the lease was released, 0 when (holder, token) did not
-- hold it. A lease that already expired is not released: its lock delay,
-- if any, runs its course. decodeRelease in scripts.go reads the reply.

if redis.replicate_commands then redis.replicate_commands() end

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires', 'queued', 'watched')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if (tonumber(cur[3]) or 0) <= now then return 0 end
local watched = tonumber(cur[5]) or 0
redis.call('HDEL', KEYS[1], 'holder', 'value', 'ttl', 'expires')
if watched > now + tonumber(ARGV[5]) then
  redis.call('PEXPIREAT', KEYS[1], cur[5])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
if cur[4] == '1' or watched > now then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return 1
