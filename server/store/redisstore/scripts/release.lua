-- release.lua: compare-and-set delete of a held lease.
--
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] watched, KEYS[4] fence: the name's
-- keys, as the key layout in doc.go describes them; the release is announced
-- while the queue or the watched key exists.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] pub/sub channel
-- ARGV[4] name (published on the channel)
-- ARGV[5] idle retention (ms): how long the fence key outlives the release
--
-- Returns 1 when the lease was released, 0 when (holder, token) did not
-- hold it. A lease that already expired is not released: its lock delay,
-- if any, runs its course. decodeRelease in scripts.go reads the reply.

if redis.replicate_commands then redis.replicate_commands() end

local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return 0
end
if cur[3] then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if tonumber(cur[3]) <= now then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return 1
