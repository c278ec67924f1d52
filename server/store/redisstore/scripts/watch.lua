-- watch.lua: mark names as observed, so that their changes are announced,
-- and read their leases, in one call for many names.
--
-- KEYS[i] lease: the key of the i-th name, as the key layout in doc.go
-- describes it (all in one Cluster slot).
-- ARGV[1] how long a mark lasts (ms)
-- ARGV[1+i] "1" to mark the i-th name, "" to only read it: the caller marks
--           a name again only when its last mark is near its end, so that an
--           observed name costs one read per call
--
-- A mark is the lease key's 'watched' field, the time it lasts until; the
-- key lives at least as long. A mark is never shortened: another
-- coordinator may have set a longer one.
--
-- Redis calls: 1 + one HMGET a name, and 3 more for a name marked (HSET,
-- PTTL, PEXPIREAT).
--
-- Returns five elements per name, in order: holder, token, value, ttl_ms,
-- expires_ms ("", "", "", 0, 0 when the name is free or in its lock delay),
-- expires_ms in unix ms of Redis' clock, token a decimal string.
-- decodeWatch in scripts.go is the one reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local mark = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local lease = KEYS[i]
  local cur = redis.call('HMGET', lease, 'holder', 'token', 'value', 'ttl', 'expires', 'watched')
  if ARGV[1 + i] == '1' and (tonumber(cur[6]) or 0) < now + mark then
    local until_ms = now + mark
    redis.call('HSET', lease, 'watched', string.format('%d', until_ms))
    local pttl = redis.call('PTTL', lease)
    if pttl < 0 or now + pttl < until_ms then
      redis.call('PEXPIREAT', lease, string.format('%d', until_ms))
    end
  end
  local expires = tonumber(cur[5]) or 0
  local n = #out
  if cur[1] and expires > now then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = cur[1], cur[2], cur[3], tonumber(cur[4]) or 0, expires
  else
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = '', '', '', 0, 0
  end
end
return out
