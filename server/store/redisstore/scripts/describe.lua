-- describe.lua: read a name's lease, last token and queue at one instant.
--
-- KEYS[1] lease, KEYS[2] waiters: the name's keys, as the key layout in
-- doc.go describes them.
--
-- Redis calls: 3 (TIME, HMGET, ZCOUNT).
--
-- Returns {holder, token, value, ttl_ms, expires_ms, last_token, waiters}:
-- holder .. expires_ms are the lease ("", "", "", 0, 0 when the name is free
-- or in its lock delay), expires_ms in unix ms of Redis' clock; token and
-- last_token are decimal strings; waiters counts the queued waiters whose
-- deadline has not passed. Read-only. decodeDescribe in scripts.go is the one
-- reader of this reply.
--
-- last_token is the counter, or, when the counter is gone (never granted,
-- idle past its retention, data loss), Redis' clock in microseconds less one.
-- That is at least every token issued before: acquire.lua issues the larger
-- of the counter plus one and the clock in microseconds, and scripts of one
-- name are more than a microsecond apart, so no token exceeds the clock at
-- its grant; and it is below every token issued later. Both hold as long as
-- the clock does not step back.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value', 'ttl', 'expires')
local last = cur[2]
if not last then
  -- TIME's microseconds less one, without going through a Lua number (a
  -- double) on the way; the microsecond part is 0 .. 999999.
  local us = tonumber(time[2])
  if us > 0 then
    last = time[1] .. string.format('%06d', us - 1)
  else
    last = (tonumber(time[1]) - 1) .. '999999'
  end
end
local waiting = redis.call('ZCOUNT', KEYS[2], string.format('%d', now), '+inf')
local expires = tonumber(cur[5]) or 0
if not cur[1] or expires <= now then
  return {'', '', '', 0, 0, last, waiting}
end
return {cur[1], cur[2], cur[3], tonumber(cur[4]) or 0, expires, last, waiting}
