-- release.lua: compare-and-set end of one held grant.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it;
-- the release is announced while waiters are queued or the name is observed.
-- holders.lua comes first (scripts.go): the grant records.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] pub/sub channel
-- ARGV[4] name (published on the channel)
-- ARGV[5] idle retention (ms): how long the lease key, and with it the
--         fencing counter (its 'token'), outlives the release
-- ARGV[6] lock delay (ms): the other grants' records outlive their expiry
--         by it, and the key outlives them
-- ARGV[7] how long the key outlives attached grants' bounds (ms), instead
--         of the idle retention, while any grant is attached to a session
--
-- A grant attached to a session (attached.lua) is released by its holder
-- even past its bound, which may be stale: its holder gives it up either
-- way, and no other holder is let in earlier than a release would.
--
-- The grant's record goes, and its weight with it. A release needs no
-- change of 'low' (the earliest expiry): removing a grant only raises the
-- true minimum.
--
-- Redis calls: the last grant of a name (an exclusive lock) 4 (HMGET, TIME,
-- HDEL, PEXPIRE); one of several 5 (HMGET, TIME, HDEL, HSET, PEXPIREAT);
-- and PUBLISH when someone listens.
--
-- Returns 1 when the grant was released, its session's id (a string) when
-- it was attached to one, 0 when (holder, token) did not hold it. A grant that already expired is not released: its lock delay,
-- if any, runs its course. decodeRelease in scripts.go reads the reply.

if redis.replicate_commands then redis.replicate_commands() end

local field = HOLDER .. ARGV[1]
local cur = redis.call('HMGET', KEYS[1], field, 'used', 'n', 'queued', 'watched', 'high', 's:' .. ARGV[1], 'slow')
local token, weight, expires = grant_head(cur[1])
if not token or token ~= ARGV[2] then
  return 0
end
local session
if cur[7] then
  local id, tok = string.match(cur[7], '^(.*):(%d+)$')
  if tok == token then session = id end
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if expires <= now and not session then return 0 end
local watched, idle = tonumber(cur[5]) or 0, tonumber(ARGV[5])
if cur[8] then idle = math.max(idle, tonumber(ARGV[7])) end
local n = (tonumber(cur[3]) or 1) - 1
if n <= 0 then
  redis.call('HDEL', KEYS[1], field, 'used', 'n', 'low', 'high', 's:' .. ARGV[1], 'slow')
  if watched > now + idle then
    redis.call('PEXPIREAT', KEYS[1], cur[5])
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
  end
else
  if cur[7] then
    redis.call('HDEL', KEYS[1], field, 's:' .. ARGV[1])
  else
    redis.call('HDEL', KEYS[1], field)
  end
  redis.call('HSET', KEYS[1], 'used', ms((tonumber(cur[2]) or weight) - weight), 'n', ms(n))
  local last = math.max((tonumber(cur[6]) or 0) + tonumber(ARGV[6]) + idle, now + idle, watched)
  redis.call('PEXPIREAT', KEYS[1], ms(last))
end
if cur[4] == '1' or watched > now then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return session or 1
