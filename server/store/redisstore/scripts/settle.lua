-- settle.lua: apply proofs of sessions to the grants attached to them in
-- one name: a close releases a session's grants with it, a renewal that is
-- due a refresh carries the session's expiry to its names.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it.
-- holders.lua and attached.lua come first (scripts.go).
-- ARGV[1] proofs (attached.lua)
-- ARGV[2] pub/sub channel
-- ARGV[3] name (announced on the channel: the name and a newline, as
--         doc.go's key layout says)
-- ARGV[4] lock delay (ms)
-- ARGV[5] how long the key outlives its attached grants' lock delay (ms)
-- ARGV[6] a session id, or "": whether the name still holds a grant of it
--         once settled is the reply's second element (a detach prunes the
--         session's names that hold none)
-- ARGV[7] the retention (ms): how long a name with no grant attached
--         outlives its grants' lock delay, and its last use
-- ARGV[8] a time T of ARGV[6]'s slot (ms), or "": detach that session from
--         the name when it holds none of its grants, so that a grant of it
--         attached at or before T is refused (acquire.lua) while the mark
--         lasts, and the session's names may forget the name (session.lua
--         prune)
-- ARGV[9] with ARGV[8], how long (ms) the mark lasts: longer than a grant
--         attached before it can take to land and be believed (the key
--         outlives it, and is made for it if there is none)
--
-- A name left with no attached grant goes back to the expiry a release
-- would give it, the retention past its grants, when its key would
-- otherwise outlive that by more than a quarter of a retention: a close
-- (or the settling of an expired session's grants) ends grants whose
-- acquire set the key to outlive them by the session keep, an hour.
--
-- Redis calls: 2 (TIME, HGETALL) and what the grants need; a detach of a
-- name with no grant PTTL and HSET, and PEXPIREAT when the key would go
-- too soon.
--
-- Returns {0, held} when settled (held 1 or 0), or {-4, id...}: the
-- sessions whose proofs it needs first (a bound passed), having changed
-- nothing. decodeSettle in session.go is the one reader of this reply.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local detach, hold = ARGV[8] or '', tonumber(ARGV[9] or '0')
local delay = tonumber(ARGV[4])
local need, ended, fields, n, high, attached = settle(KEYS[1], now, parse_proofs(ARGV[1]), delay, tonumber(ARGV[5]))
if need then
  table.insert(need, 1, -4)
  return need
end
if next(fields) == nil then
  -- No key (settle changed nothing): no grant; a detach makes one for the
  -- mark alone.
  if detach ~= '' then
    redis.call('HSET', KEYS[1], 'd:' .. ARGV[6], detach .. ':' .. ms(now + hold))
    redis.call('PEXPIRE', KEYS[1], ARGV[9])
  end
  return {0, 0}
end
if not attached then
  local idle = tonumber(ARGV[7])
  local last = math.max(now + idle, tonumber(fields['watched']) or 0)
  if n > 0 then last = math.max(last, high + delay + idle) end
  if detach ~= '' then last = math.max(last, now + hold) end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 and (now + pttl > last + idle / 4 or pttl < hold) then
    -- 'ex' said the key lives longer: acquire would trust it.
    redis.call('HDEL', KEYS[1], 'ex')
    redis.call('PEXPIREAT', KEYS[1], ms(last))
  end
end
if ended and (fields['queued'] == '1' or (tonumber(fields['watched']) or 0) > now) then
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. '\n')
end
local held = 0
if ARGV[6] ~= '' then
  -- Ended by the proofs only for a closed or expired session, which is
  -- not pruned: a refresh carries a proof of life.
  for f, rec in pairs(fields) do
    if string.sub(f, 1, 2) == HOLDER then
      local g = unpack_grant(string.sub(f, 3), rec)
      if g and g.session == ARGV[6] then held = 1 end
    end
  end
  if held == 0 and detach ~= '' then
    -- The mark, 'T:until' (acquire.lua reads it): T the latest detach,
    -- until when it lasts on this clock. Marks that ran out go, so that a
    -- name many sessions come and go on keeps only recent ones.
    local mark, t, gone = 'd:' .. ARGV[6], tonumber(detach), {}
    for f, v in pairs(fields) do
      if string.sub(f, 1, 2) == 'd:' then
        local ft, fu = string.match(v, '^(%d+):(%d+)$')
        local live = ft and tonumber(fu) > now
        if f == mark then
          if live then t = math.max(t, tonumber(ft)) end
        elseif not live then
          gone[#gone + 1] = f
        end
      end
    end
    redis.call('HSET', KEYS[1], mark, ms(t) .. ':' .. ms(now + hold))
    if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
  end
end
return {0, held}
