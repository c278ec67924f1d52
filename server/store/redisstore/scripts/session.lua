-- session.lua: create, renew, close, check or describe a session, in the
-- session's own slot: one script whatever the number of leases attached.
--
-- KEYS[1] session, KEYS[2] names, KEYS[3] marker (the data-loss marker of
-- the session's slot): the session's keys, as the key layout in doc.go
-- describes them.
-- ARGV[1] op: create, renew, attach (check, as the owner, and add ARGV[6]
--         to the names), check (anyone: a name's script asked for a proof),
--         close or describe
-- ARGV[2] owner (ignored by check)
-- ARGV[3] ttl (ms, >= 1; create only)
-- ARGV[4] quarantine (ms, 0 disables)
-- ARGV[5] retention (ms): how long the keys outlive the session's end, so
--         that a dead session is reported dead rather than unknown
-- ARGV[6] name (attach only)
-- ARGV[7] refresh interval (ms; renew only): how often, at most, a renewal
--         returns the names, for the coordinator to carry the session's
--         expiry to them (the lease keys' lifetime follows it)
--
-- The session's slot checks its own data-loss marker, exactly as a grant
-- does (marker.lua, put in by scripts.go, is acquire.lua's check too): a lost session may still be believed alive by its holder, so its
-- slot is quarantined and every op refused until then; after it a lost
-- session is unknown, which a name treats as dead (see doc.go).
--
-- Redis calls: renew 5 (TIME, GET marker, HMGET, HSET, PEXPIREAT) and one
-- more for the names key, SMEMBERS when a refresh is due.
--
-- Returns, with lost = 1 when this call found the marker missing, else 0:
--   {-1, lost, retry_after_ms}  quarantined
--   {-2, lost}                  no such session (never, or forgotten)
--   {-3, lost}                  another owner's
--   {-4, lost}                  closed
--   {-5, lost, ago_ms}          expired ago_ms ago
--   {1, lost, ttl_ms, remaining_ms, expires_ms, names...}: alive (names for
--   describe, for close, which closed it, and for a renewal due a refresh)
-- A close of a closed session answers {1, ...} with the names too, so that
-- a close interrupted midway can be carried out again. decodeSession in
-- session.go is the one reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local session, names, marker = KEYS[1], KEYS[2], KEYS[3]
local op, owner, quarantine, keep = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])

local function ms(n) return string.format('%d', n) end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- (marker.lua goes here: scripts.go)

if op == 'create' then
  local ttl = tonumber(ARGV[3])
  local expires = now + ttl
  redis.call('HSET', session, 'owner', owner, 'ttl', ARGV[3], 'expires', ms(expires), 'refreshed', ms(now))
  redis.call('PEXPIREAT', session, ms(expires + keep))
  return {1, lost, ttl, ttl, expires}
end

local cur = redis.call('HMGET', session, 'owner', 'ttl', 'expires', 'closed', 'refreshed')
if not cur[1] then return {-2, lost} end
if op ~= 'check' and cur[1] ~= owner then return {-3, lost} end
local ttl, expires = tonumber(cur[2]), tonumber(cur[3])

local function with_names(reply)
  for _, n in ipairs(redis.call('SMEMBERS', names)) do reply[#reply + 1] = n end
  return reply
end

if cur[4] == '1' then
  if op == 'close' then return with_names({1, lost, ttl, 0, expires}) end
  return {-4, lost}
end
if expires <= now then return {-5, lost, now - expires} end

if op == 'renew' then
  expires = now + ttl
  local refresh = (tonumber(cur[5]) or 0) + tonumber(ARGV[7]) <= now
  if refresh then
    redis.call('HSET', session, 'expires', ms(expires), 'refreshed', ms(now))
  else
    redis.call('HSET', session, 'expires', ms(expires))
  end
  redis.call('PEXPIREAT', session, ms(expires + keep))
  if refresh then
    redis.call('PEXPIREAT', names, ms(expires + keep))
    return with_names({1, lost, ttl, ttl, expires})
  end
  return {1, lost, ttl, ttl, expires}
end
if op == 'attach' then
  redis.call('SADD', names, ARGV[6])
  redis.call('PEXPIREAT', names, ms(expires + keep))
  return {1, lost, ttl, expires - now, expires}
end
if op == 'close' then
  redis.call('HSET', session, 'closed', '1')
  return with_names({1, lost, ttl, 0, expires})
end
if op == 'describe' then
  return with_names({1, lost, ttl, expires - now, expires})
end
return {1, lost, ttl, expires - now, expires} -- check
