-- describe.lua: read a name's lease, last token and queue at one instant.
--
-- KEYS[1] lease, KEYS[2] fence, KEYS[3] waiters: the name's keys, as the key
-- layout in doc.go describes them.
--
-- Returns {holder, token, value, ttl_ms, expires_ms, last_token, waiters}:
-- holder .. expires_ms are the lease ("", "", "", 0, 0 when the name is free
-- or in its lock delay), expires_ms in unix ms of Redis' clock; token and
-- last_token are decimal strings, last_token "0" when no token was issued (or
-- Redis lost the counter); waiters counts the queued waiters whose deadline
-- has not passed. Read-only. decodeDescribe in scripts.go is the one reader
-- of this reply.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value', 'ttl', 'expires')
local last = redis.call('GET', KEYS[2]) or '0'
local waiting = redis.call('ZCOUNT', KEYS[3], string.format('%d', now), '+inf')
if not cur[1] then
  return {'', '', '', 0, 0, last, waiting}
end
-- A lease written before 'expires' was kept ends with its key.
local expires = tonumber(cur[5]) or now + redis.call('PTTL', KEYS[1])
if expires <= now then
  return {'', '', '', 0, 0, last, waiting}
end
return {cur[1], cur[2], cur[3], tonumber(cur[4]) or 0, expires, last, waiting}
