-- watch.lua: mark names as observed, so that their changes are announced,
-- and read their grants, in one call for many names.
--
-- KEYS[i] lease: the key of the i-th name, as the key layout in doc.go
-- describes it (all in one Cluster slot). holders.lua comes first
-- (scripts.go): the grant records.
-- ARGV[1] how long a mark lasts (ms)
-- ARGV[1+i] "1" to mark the i-th name, "" to only read it: the caller marks
--           a name again only when its last mark is near its end, so that an
--           observed name costs one read per call
--
-- A mark is the lease key's 'watched' field, the time it lasts until; the
-- key lives at least as long. A mark is never shortened: another
-- coordinator may have set a longer one.
--
-- Redis calls: 1 + one HGETALL a name, and 3 more for a name marked (HSET,
-- PTTL, PEXPIREAT).
--
-- Returns, per name in order: capacity, count, then six elements per live
-- grant, in token order: holder, token, value, ttl_ms, expires_ms, weight
-- (expires_ms in unix ms of Redis' clock, token a decimal string).
-- decodeWatch in scripts.go is the one reader of this reply.

if redis.replicate_commands then redis.replicate_commands() end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local mark = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local lease = KEYS[i]
  local all = redis.call('HGETALL', lease)
  local watched = 0
  for j = 1, #all, 2 do
    if all[j] == 'watched' then watched = tonumber(all[j + 1]) or 0 end
  end
  if ARGV[1 + i] == '1' and watched < now + mark then
    local until_ms = now + mark
    redis.call('HSET', lease, 'watched', ms(until_ms))
    local pttl = redis.call('PTTL', lease)
    if pttl < 0 or now + pttl < until_ms then
      redis.call('PEXPIREAT', lease, ms(until_ms))
    end
  end
  local grants, cap = live_grants(all, now)
  local k = #out
  out[k + 1], out[k + 2] = cap, #grants
  for _, g in ipairs(grants) do
    k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] = g.holder, g.token, g.value, g.ttl, g.expires, g.weight
  end
end
return out
