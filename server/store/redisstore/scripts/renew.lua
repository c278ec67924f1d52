-- renew.lua: compare-and-set expiry of one held grant.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it.
-- holders.lua comes first (scripts.go), after the settings line: the grant
-- records.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] ttl (ms, >= 1); may shorten the grant
--
-- Constants of the store's copy (scripts.go; acquire.lua says why):
-- LOCK_DELAY + IDLE (ms) is how long the lease key, which keeps the fencing
-- counter, outlives the last grant; LOCK_DELAY + KEEP (ms) how long it
-- outlives attached grants' bounds, used instead while any grant is
-- attached to a session.
--
-- A grant attached to a session (attached.lua) is not renewed here: its
-- session's renewal keeps it, and the reply is {2}.
--
-- A renewal that shortens the grant lowers 'low' (the earliest expiry) when
-- it goes below it; one that pushes it out need not touch it.
--
-- Redis calls: 3 (HMGET, TIME, HSET), and PEXPIREAT when the key's expiry
-- must move (about once per eighth of a retention); 4 before 'ex'.
--
-- Returns {0} when (holder, token) does not hold an unexpired grant, {2}
-- when it is attached to a session, else
-- {1, holder, token, value, ttl_ms, expires_ms, weight}: the renewed grant,
-- expiring at expires_ms (unix ms, Redis' clock). decodeRenew in scripts.go
-- is the one reader of this reply.

local field = HOLDER .. ARGV[1]
local cur = redis.call('HMGET', KEYS[1], field, 'watched', 'n', 'high', 'low', 's:' .. ARGV[1], 'slow', 'ex')
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
-- The key lives on, and never less than the name's observation mark. While
-- 'ex' (its expiry as the scripts last set it: acquire.lua's keep_key)
-- covers that by no more than a quarter of the span, it stays; else it
-- moves an eighth of the span past the need.
local span = LOCK_DELAY + IDLE
if cur[7] then span = math.max(span, LOCK_DELAY + KEEP) end
local last = math.max(high + span, tonumber(cur[2]) or 0)
local ex, at = tonumber(cur[8]), nil
if not (ex and ex >= last and ex <= last + span / 4) then
  at = ms(last + math.floor(span / 8))
  fields[#fields + 1], fields[#fields + 2] = 'ex', at
end
redis.call('HSET', KEYS[1], unpack(fields))
if at then redis.call('PEXPIREAT', KEYS[1], at) end
return {1, ARGV[1], g.token, g.value, ttl, expires, g.weight}
