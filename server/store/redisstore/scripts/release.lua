-- release.lua: compare-and-set end of one held grant.
--
-- KEYS[1] lease: the name's key, as the key layout in doc.go describes it;
-- the release is announced while waiters are queued or the name is observed.
-- holders.lua comes first (scripts.go), after the settings line: the grant
-- records.
-- ARGV[1] holder
-- ARGV[2] token (decimal)
-- ARGV[3] name (announced on the store's channel: the name, a newline, a
--         minus and the token released, as doc.go's key layout says)
--
-- Constants of the store's copy (scripts.go; acquire.lua says why): CHANNEL,
-- the store's pub/sub channel; IDLE,
-- the idle retention (ms): how long the lease key, and with it the fencing
-- counter (its 'token'), outlives the release; LOCK_DELAY (ms): the other
-- grants' records outlive their expiry by it, and the key outlives them;
-- KEEP (ms): how long the key outlives attached grants' bounds instead of
-- IDLE, while any grant is attached to a session. Once the last grant is
-- released none is, and the key outlives the release by IDLE as any
-- name's does: a name used once in a session is gone after the retention,
-- not after KEEP (an hour at least). A hot name's (acquire.lua) keeps KEEP:
-- its grants come back, and need it.
--
-- A grant attached to a session (attached.lua) is released by its holder
-- even past its bound, which may be stale: its holder gives it up either
-- way, and no other holder is let in earlier than a release would.
--
-- The grant's record goes, and its weight with it. A release needs no
-- change of 'low' (the earliest expiry): removing a grant only raises the
-- true minimum.
--
-- Redis calls: the last grant of a name (an exclusive lock) 3 (HMGET, TIME,
-- HDEL), 4 with PEXPIREAT when the key's expiry must move (see 'ex'
-- below), which the release of a name's last attached grant does unless
-- the name is hot: its acquire set the expiry KEEP ahead; one of several 4 (HMGET, TIME, HSET, HDEL), or 5; and PUBLISH
-- when someone listens. Before 'ex', 4 and 5.
--
-- Returns 1 when the grant was released, its session's id (a string) when
-- it was attached to one, unless it was the last grant of a hot name or of
-- one with waiters queued (its grants come back: its session's names keep
-- it), 0 when (holder, token) did not hold it. The coordinator detaches
-- the name it returns a session for from that session a little later, if
-- it then holds none of the session's grants (detacher.go), so that the
-- session's names forget it. A grant that already expired is not
-- released: its lock delay, if any, runs its course. decodeRelease in
-- scripts.go reads the reply.

local field, token = HOLDER .. ARGV[1], ARGV[2]
local cur = redis.call('HMGET', KEYS[1], field, 'sum', 'queued', 'watched', 'ex', 'hot')
-- The record's token, expiry and session, as strings (holders.lua packs
-- them); numbers only where needed: converting them is much of what a
-- release costs Redis.
local tok, expires, session
if cur[1] then tok, expires, session = string.match(cur[1], '^(%d+):%d+:%d+:(%d+):(%x*):') end
if not tok or tok ~= token then
  return 0
end
if session == '' then session = nil end
-- Redis' time in ms, as a decimal string to compare the record's expiry
-- with (longer is larger), and as a number: one conversion.
local time = redis.call('TIME')
local us = time[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
local now_ms = string.sub(time[1] .. us, 1, -4)
if not session and (#expires < #now_ms or (#expires == #now_ms and expires <= now_ms)) then return 0 end
local now = tonumber(now_ms)
local watched = tonumber(cur[4]) or 0
-- The key must outlive the release by the retention, and the name's
-- observation mark. 'ex' is its expiry as the scripts last set it (see
-- acquire.lua's keep_key): while that covers the need by no more than a
-- quarter of a retention (a grant of a TTL and lock delay below an eighth
-- of one, released), the key is left as it is; else it expires at the
-- need, and 'ex' goes.
local ex = tonumber(cur[5])
if cur[2] and string.sub(cur[2], 1, 2) ~= '1:' then
  -- One of several grants (a semaphore's share, attached to a session or
  -- not): its weight goes back. The summary ('sum', holders.lua) counts
  -- the grants first, so that telling the last one needs no conversion; one
  -- that counts no more than one (not a summary) is the last one's.
  -- (holders.lua's decoders go here: scripts.go)
  local n, used, low, high, slow = unpack_sum(cur[2])
  if n > 1 then
    -- While grants may be attached (slow), the key outlives them by KEEP;
    -- slow stays, still at most the earliest bound of those left.
    local idle = IDLE
    if slow then idle = math.max(idle, KEEP) end
    redis.call('HSET', KEYS[1], 'sum', pack_sum(n - 1, used - unpack_grant(ARGV[1], cur[1]).weight, low, high, slow))
    local last = math.max(high + LOCK_DELAY + idle, now + idle, watched)
    local gone = {field}
    if not (ex and ex >= last and ex <= last + idle / 4) then
      gone[#gone + 1] = 'ex'
      redis.call('PEXPIREAT', KEYS[1], ms(last))
    end
    redis.call('HDEL', KEYS[1], unpack(gone))
    if cur[3] == '1' or watched > now then
      redis.call('PUBLISH', CHANNEL, ARGV[3] .. '\n-' .. token)
    end
    return session or 1
  end
end
-- The last grant: no grant stays attached, so the key needs IDLE alone,
-- unless this is an attached grant of a hot name (acquire.lua): its next
-- acquires need KEEP again, and moving the expiry down and up at every
-- cycle would cost two commands a cycle.
local keep_for, slack = IDLE, IDLE / 4
if session and cur[6] then
  -- Its acquire set the expiry past the bound, up to a session's TTL (the
  -- record's ttl) ahead: that much more is no reason to move it.
  keep_for = math.max(IDLE, KEEP)
  slack = keep_for / 4 + LOCK_DELAY + (tonumber(string.match(cur[1], '^%d+:%d+:(%d+):')) or 0)
end
local last = now + keep_for
if watched > last then last = watched end
local kept = ex and ex >= last and ex <= last + slack
if kept then
  -- The summary goes with the last grant, and with it any bound (slow).
  redis.call('HDEL', KEYS[1], field, 'sum')
else
  redis.call('HDEL', KEYS[1], field, 'sum', 'ex')
end
if not kept then redis.call('PEXPIREAT', KEYS[1], ms(last)) end
if cur[3] == '1' or watched > now then
  redis.call('PUBLISH', CHANNEL, ARGV[3] .. '\n-' .. token)
end
-- The session keeps a hot name, and one others wait for: its grants come
-- back, and detaching it would only make them attach again.
if cur[6] or cur[3] == '1' then return 1 end
return session or 1
