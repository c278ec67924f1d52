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
-- A renewal that shortens the grant lowers the summary's low (the earliest
-- expiry: 'sum', holders.lua) when it goes below it; one that pushes it out
-- need not lower it.
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
local cur = redis.call('HMGET', KEYS[1], field, 'watched', 'sum', 'ex')
local g = unpack_grant(ARGV[1], cur[1])
if not g or g.token ~= ARGV[2] then
  return {0}
end
if g.session ~= '' then
  return {2}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if g.expires <= now then
  return {0} -- expired; only the lock delay keeps its weight
end
local ttl = tonumber(ARGV[3])
local expires = now + ttl
local n, used, low, high, slow = unpack_sum(cur[3])
if n <= 1 or expires > high then high = expires end
if not low or expires < low then low = expires end
-- A record without a summary (never written so): count it, and let the
-- next grant read the records (low 0) to set the summary exactly.
if n < 1 then n, used, low = 1, g.weight, 0 end
local fields = {field, pack_grant(g.token, g.weight, ttl, expires, '', g.value), 'sum', pack_sum(n, used, low, high, slow)}
-- The key lives on, and never less than the name's observation mark. While
-- 'ex' (its expiry as the scripts last set it: acquire.lua's keep_key)
-- covers that by no more than a quarter of the span, it stays; else it
-- moves an eighth of the span past the need.
local span = LOCK_DELAY + IDLE
if slow then span = math.max(span, LOCK_DELAY + KEEP) end
local last = math.max(high + span, tonumber(cur[2]) or 0)
local ex, at = tonumber(cur[4]), nil
if not (ex and ex >= last and ex <= last + span / 4) then
  at = ms(last + math.floor(span / 8))
  fields[#fields + 1], fields[#fields + 2] = 'ex', at
end
redis.call('HSET', KEYS[1], unpack(fields))
if at then redis.call('PEXPIREAT', KEYS[1], at) end
return {1, ARGV[1], g.token, g.value, ttl, expires, g.weight}
