-- describe.lua: read a name's lease, last token and queue at one instant.
--
-- KEYS[1] lease   HASH holder, token, value, ttl (ms), expires (unix ms)
-- KEYS[2] fence   STRING last issued token
-- KEYS[3] waiters ZSET waiter -> deadline (unix ms)
--
-- Returns {holder, token, value, ttl_ms, remaining_ms, now_ms, last_token,
-- waiters}: holder is "" when the name is free (or in its lock delay);
-- last_token is a decimal string, "0" when no token was issued (or Redis lost
-- the counter); waiters counts the queued waiters whose deadline has not
-- passed. Read-only.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'value', 'ttl', 'expires')
local last = redis.call('GET', KEYS[2]) or '0'
local waiting = redis.call('ZCOUNT', KEYS[3], string.format('%d', now), '+inf')
local expires = tonumber(cur[5])
if not cur[1] or (expires and expires <= now) then
  return {'', '', '', 0, 0, now, last, waiting}
end
local remaining = redis.call('PTTL', KEYS[1])
if expires then remaining = expires - now end
return {cur[1], cur[2], cur[3], tonumber(cur[4]) or 0, remaining, now, last, waiting}
