-- renew.lua: compare-and-set expiry of one held grant.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it.
-- holders.lua comes first (scripts.go): the grant records.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the grant
-- ARGV[4] lock delay + idle retention (ms): how long the lease key, which
--         keeps the fencing counter, outlives the last grant
-- ARGV[5] lock delay + how long the key outlives attached grants' bounds
--         (ms), used instead while any grant is attached to a session
--
-- A grant attached to a session (attached.lua) is not renewed here: its
-- session's renewal keeps it, and the reply is {2}.
--
-- A renewal that shortens the grant lowers 'low' (the earliest expiry) when
-- it goes below it; one that pushes it out need not touch it.
--
-- Redis calls: 4 (HMGET, TIME, HSET, PEXPIREAT).
--
-- Returns {0} when (holder, token) does not hold an unexpired grant, {2}
-- when it is attached to a session, else
-- {1, holder, token, value, ttl_ms, expires_ms, weight}: the renewed grant,
-- expiring at expires_ms (unix ms, Redis' clock). decodeRenew in scripts.go
-- is the one reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local field = HOLDER .. ARGV[1]
local cur = redis.call('HMGET', KEYS[1], field, 'watched', 'n', 'high', 'low', 's:' .. ARGV[1], 'slow')
local g = unpack_grant(ARGV[1], cur[1])
if not g or g.token ~= ARGV[2] then
  return {0}
end
if cur[6] and string.match(cur[6], ':(%d+)$') == g.token then
  return {2}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if g.expires <= now then
  return {0} -- expired; only the lock delay keeps its weight
end
local ttl = tonumber(ARGV[3])
local expires = now + ttl
local high = tonumber(cur[4]) or 0
if (tonumber(cur[3]) or 1) <= 1 or expires > high then high = expires end
local fields = {field, pack_grant(g.token, g.weight, ttl, expires, g.value), 'high', ms(high)}
local low = tonumber(cur[5])
if not low or expires < low then
  fields[#fields + 1], fields[#fields + 2] = 'low', ms(expires)
end
redis.call('HSET', KEYS[1], unpack(fields))
-- The key lives on, and never less than the name's observation mark.
local span = tonumber(ARGV[4])
if cur[7] then span = math.max(span, tonumber(ARGV[5])) end
local last = math.max(high + span, tonumber(cur[2]) or 0)
redis.call('PEXPIREAT', KEYS[1], ms(last))
return {1, ARGV[1], g.token, g.value, ttl, expires, g.weight}
