-- session.lua: create, renew, close, check or describe a session, in the
-- session's own slot: one script whatever the number of leases attached.
--
-- KEYS[1] session, KEYS[2] names, KEYS[3] marker (the data-loss marker of
-- the session's slot): the session's keys, as the key layout in doc.go
-- describes them.
-- ARGV[1] op: create, renew, attach (check, as the owner, and add ARGV[6]
--         to the names), check (anyone: a name's script asked for a proof,
--         or a prune needs this slot's time), close, describe, prune
--         (anyone: forget those of the names ARGV[8..] last attached at or
--         before ARGV[3]), reap (anyone: check, with the names of an
--         expired session) or reaped (anyone: check, and forget the names
--         of a dead session, once they are settled)
-- ARGV[2] owner (ignored by the ops anyone may run)
-- ARGV[3] ttl (ms, >= 1; create only); for prune, a time of this slot's
--         clock (ms)
-- ARGV[4] quarantine (ms, 0 disables)
-- ARGV[5] retention (ms): how long the session outlives its end, so that
--         a dead session is reported dead rather than unknown (a name treats
--         an unknown one as dead for at least this long)
-- ARGV[6] name (attach only)
-- ARGV[7] the session keep (ms): how long the names outlive the session's
--         end until they are settled, and twice how often, at most, a
--         renewal returns the names, for the coordinator to carry the
--         session's expiry to them (the lease keys' lifetime follows it)
-- ARGV[8..] names (prune only)
--
-- The names key is a hash from each name to when the session last attached
-- a grant there (ms, this slot's clock): the attach time, which the grant
-- carries to the name (acquire.lua). A release does not remove its name: a
-- removal racing another attach of the same name (a semaphore's shares, or
-- a release and an acquire by two goroutines of one client) could forget a
-- name that holds a grant, and a name forgotten while held would miss the
-- refresh and lose its key. Instead the coordinator detaches a name
-- (settle.lua): at a time T of this slot, it finds the name holding none
-- of the session's grants and marks it to refuse every grant of the
-- session attached at or before T; then prune forgets the name only if its
-- last attach is at or before T (ARGV[3]). A grant that lands on the name
-- afterwards comes from a later attach, which put the name back with a
-- time past T. Attach times never fall behind a prune's T ('pruned', the
-- latest), so a clock that steps back cannot make a new attach look old.
--
-- The session's slot checks its own data-loss marker, exactly as a grant
-- does (marker.lua, put in by scripts.go, is acquire.lua's check too): a lost session may still be believed alive by its holder, so its
-- slot is quarantined and every op refused until then; after it a lost
-- session is unknown, which a name treats as dead (see doc.go).
--
-- Redis calls: renew 5 (TIME, GET marker, HMGET, HSET, PEXPIREAT) and two
-- more when a refresh is due (PEXPIREAT and HKEYS of the names); attach 5
-- (TIME, GET marker, HMGET, HSET, PEXPIREAT); prune 4 (TIME, GET, HMGET,
-- HSET pruned), an HGET a name and an HDEL a forgotten one.
--
-- Returns, with lost = 1 when this call found the marker missing, else 0:
--   {-1, lost, retry_after_ms}  quarantined
--   {-2, lost}                  no such session (never, or forgotten)
--   {-3, lost}                  another owner's
--   {-4, lost}                  closed
--   {-5, lost, ago_ms, names...} expired ago_ms ago (names for reap)
--   {1, lost, ttl_ms, remaining_ms, expires_ms, at_ms, names...}: alive, at
--   at_ms of this slot's clock (attach: the time recorded for the name);
--   names for describe, for close, which closed it, and for a renewal due
--   a refresh; for prune, those it forgot
-- A close of a closed session answers {1, ...} with the names too, so that
-- a close interrupted midway can be carried out again, until reaped
-- forgets them once they are settled. decodeSession in
-- session.go is the one reader of this reply.

local session, names, marker = KEYS[1], KEYS[2], KEYS[3]
local op, owner, quarantine = ARGV[1], ARGV[2], tonumber(ARGV[4])
local retention, keep = tonumber(ARGV[5]), tonumber(ARGV[7])

local function ms(n) return string.format('%d', n) end

-- now_ms, Redis' time in ms as a decimal string, is what marker.lua
-- compares; now the same as a number.
local time = redis.call('TIME')
local us = time[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
local now_ms = string.sub(time[1] .. us, 1, -4)
local now = tonumber(now_ms)

-- (marker.lua goes here: scripts.go)

if op == 'create' then
  local ttl = tonumber(ARGV[3])
  local expires = now + ttl
  redis.call('HSET', session, 'owner', owner, 'ttl', ARGV[3], 'expires', ms(expires), 'refreshed', ms(now))
  redis.call('PEXPIREAT', session, ms(expires + retention))
  return {1, lost, ttl, ttl, expires, now}
end

local cur = redis.call('HMGET', session, 'owner', 'ttl', 'expires', 'closed', 'refreshed', 'pruned')
if not cur[1] then return {-2, lost} end
local anyone = op == 'check' or op == 'reap' or op == 'reaped' or op == 'prune'
if not anyone and cur[1] ~= owner then return {-3, lost} end
local ttl, expires = tonumber(cur[2]), tonumber(cur[3])

local function with_names(reply)
  for _, n in ipairs(redis.call('HKEYS', names)) do reply[#reply + 1] = n end
  return reply
end

if cur[4] == '1' then
  if op == 'close' then return with_names({1, lost, ttl, 0, expires, now}) end
  if op == 'reaped' then redis.call('DEL', names) end
  return {-4, lost}
end
if expires <= now then
  if op == 'reap' then return with_names({-5, lost, now - expires}) end
  if op == 'reaped' then redis.call('DEL', names) end
  return {-5, lost, now - expires}
end

if op == 'renew' then
  expires = now + ttl
  local refresh = (tonumber(cur[5]) or 0) + keep / 2 <= now
  if refresh then
    redis.call('HSET', session, 'expires', ms(expires), 'refreshed', ms(now))
  else
    redis.call('HSET', session, 'expires', ms(expires))
  end
  redis.call('PEXPIREAT', session, ms(expires + retention))
  if refresh then
    redis.call('PEXPIREAT', names, ms(expires + keep))
    return with_names({1, lost, ttl, ttl, expires, now})
  end
  return {1, lost, ttl, ttl, expires, now}
end
if op == 'attach' then
  local at = math.max(now, (tonumber(cur[6]) or 0) + 1)
  redis.call('HSET', names, ARGV[6], ms(at))
  redis.call('PEXPIREAT', names, ms(expires + keep))
  return {1, lost, ttl, expires - now, expires, at}
end
if op == 'close' then
  redis.call('HSET', session, 'closed', '1')
  return with_names({1, lost, ttl, 0, expires, now})
end
if op == 'describe' then
  return with_names({1, lost, ttl, expires - now, expires, now})
end
if op == 'prune' then
  local before, reply = tonumber(ARGV[3]), {1, lost, ttl, expires - now, expires, now}
  if before > (tonumber(cur[6]) or 0) then redis.call('HSET', session, 'pruned', ms(before)) end
  for i = 8, #ARGV do
    local at = tonumber(redis.call('HGET', names, ARGV[i]))
    if at and at <= before then
      redis.call('HDEL', names, ARGV[i])
      reply[#reply + 1] = ARGV[i]
    end
  end
  return reply
end
return {1, lost, ttl, expires - now, expires, now} -- check
